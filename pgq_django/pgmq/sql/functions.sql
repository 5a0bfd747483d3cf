-- PGMQ 1.13.0's public functions, with its names, argument names, types, defaults and
-- result types, written over the helpers of schema.sql. Placeholders as there.

------------------------------------------------------------------------------------------
-- Names and queues
------------------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.validate_queue_name(queue_name TEXT) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF length(queue_name) > 47 THEN
        RAISE EXCEPTION 'queue name is too long, maximum length is 47 characters';
    END IF;
END;
$$;

CREATE FUNCTION @extschema@.format_table_name(queue_name text, prefix text) RETURNS TEXT
LANGUAGE plpgsql AS $$
BEGIN
    IF queue_name ~ '\$|;|--|''' THEN
        RAISE EXCEPTION 'queue name contains invalid characters: $, ;, --, or \''';
    END IF;
    RETURN lower(prefix || '_' || queue_name);
END;
$$;

-- Serialises the creation and drop of one queue name (PGMQ's lock, same key).
CREATE FUNCTION @extschema@.acquire_queue_lock(queue_name TEXT) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pgmq.queue_' || queue_name));
END;
$$;

CREATE FUNCTION @extschema@.create_non_partitioned(queue_name TEXT) RETURNS void
LANGUAGE sql AS $$ SELECT @extschema@._pgq_create(queue_name, true) $$;

CREATE FUNCTION @extschema@."create"(queue_name TEXT) RETURNS void
LANGUAGE sql AS $$ SELECT @extschema@._pgq_create(queue_name, true) $$;

CREATE FUNCTION @extschema@.create_unlogged(queue_name TEXT) RETURNS void
LANGUAGE sql AS $$ SELECT @extschema@._pgq_create(queue_name, false) $$;

-- Every queue already lives in msg_id-range partitions (pgq_django.partitions keeps them):
-- the intervals are accepted and checked as PGMQ checks premake, and no pg_partman is needed.
CREATE FUNCTION @extschema@.create_partitioned(
    queue_name TEXT,
    partition_interval TEXT DEFAULT '10000',
    retention_interval TEXT DEFAULT '100000',
    premake INTEGER DEFAULT 4
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @extschema@.validate_queue_name(queue_name);
    IF premake < 1 THEN
        RAISE EXCEPTION 'premake must be at least 1, got %', premake;
    END IF;
    PERFORM @extschema@._pgq_create(queue_name, true);
END;
$$;

CREATE FUNCTION @extschema@.drop_queue(queue_name TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    qrow @pgq@.pgq_queue;
BEGIN
    PERFORM @extschema@.acquire_queue_lock(lower(queue_name));
    BEGIN
        qrow := @extschema@._pgq_queue(queue_name);
    EXCEPTION WHEN undefined_table THEN
        RAISE NOTICE 'pgmq queue `%` does not exist', queue_name;
        RETURN FALSE;
    END;
    -- Django's ON DELETE SET NULL of the dead-letter key, which the database leaves to it.
    UPDATE @pgq@.pgq_queue SET dead_letter_queue_id = NULL WHERE dead_letter_queue_id = qrow.id;
    DELETE FROM @pgq@.pgq_queue WHERE id = qrow.id;
    RETURN TRUE;
END;
$$;

CREATE FUNCTION @extschema@.drop_queue(queue_name TEXT, partitioned BOOLEAN) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    RAISE WARNING 'drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. Use drop_queue(queue_name) instead';
    PERFORM @extschema@.drop_queue(queue_name);
    RETURN TRUE;
END;
$$;

-- The Python API's purge, of the queue PGMQ's call names.
CREATE FUNCTION @extschema@.purge_queue(queue_name TEXT) RETURNS BIGINT
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    qrow @pgq@.pgq_queue := @extschema@._pgq_queue(queue_name);
    result record;
BEGIN
    @store:purge|queue=qrow.name@ INTO result;
    RETURN result.purged;
END;
$$;

CREATE FUNCTION @extschema@.detach_archive(queue_name TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    RAISE WARNING 'detach_archive(queue_name) is deprecated and is a no-op. It will be removed in PGMQ v2.0. Archive tables are no longer member objects.';
END;
$$;

CREATE FUNCTION @extschema@.list_queues() RETURNS SETOF @extschema@.queue_record
LANGUAGE sql STABLE AS $$
    SELECT m.queue_name, m.is_partitioned, m.is_unlogged, m.created_at
    FROM @extschema@.meta m ORDER BY m.created_at, m.queue_name
$$;

-- PGMQ's metrics of one queue: counted over its live messages; total_messages is the
-- number of messages ever sent to it (pgq_django's 'sent' counters, where PGMQ reads its
-- per-queue sequence). No queue has a default partition: default_partition_length is NULL.
CREATE FUNCTION @extschema@.metrics(queue_name TEXT) RETURNS @extschema@.metrics_result
LANGUAGE plpgsql AS $$
DECLARE
    qrow @pgq@.pgq_queue := @extschema@._pgq_queue(queue_name);
    result @extschema@.metrics_result;
BEGIN
    SELECT metrics.queue_name, count(*),
           EXTRACT(epoch FROM (now() - max(m.enqueued_at)))::int,
           EXTRACT(epoch FROM (now() - min(m.enqueued_at)))::int,
           @counter_total:'sent'|qrow.id@::bigint,
           now(),
           count(*) FILTER (WHERE m.vt <= now()),
           NULL::bigint
    INTO result
    FROM @pgq@.pgq_message m WHERE m.queue_id = qrow.id;
    RETURN result;
END;
$$;

CREATE FUNCTION @extschema@.metrics_all() RETURNS SETOF @extschema@.metrics_result
LANGUAGE plpgsql AS $$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT name FROM @pgq@.pgq_queue ORDER BY created_at, name LOOP
        RETURN NEXT @extschema@.metrics(q.name);
    END LOOP;
END;
$$;

-- pgq_django's ready index (queue_id, priority, msg_id) and group index (queue_id,
-- group_id, msg_id) already serve FIFO reads: nothing to make, but the queue must exist.
CREATE FUNCTION @extschema@.create_fifo_index(queue_name TEXT) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @extschema@._pgq_queue(queue_name);
END;
$$;

CREATE FUNCTION @extschema@.create_fifo_indexes_all() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    NULL;
END;
$$;

------------------------------------------------------------------------------------------
-- Send
------------------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.send(
    queue_name TEXT, msg JSONB, headers JSONB, delay TIMESTAMP WITH TIME ZONE
) RETURNS SETOF BIGINT
LANGUAGE sql AS $$ SELECT * FROM @extschema@._pgq_send_one($1, $2, $3, $4) $$;

-- The call PGMQ's clients make most, spelled out rather than passed to _pgq_send_one: a
-- wrapper is one more function call on every send, a measurable share of its time on the
-- server (docs/pgmq.md, Speed). It is _pgq_send_one without headers or delay.
CREATE FUNCTION @extschema@.send(queue_name TEXT, msg JSONB) RETURNS SETOF BIGINT
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    target bigint;
    sent_at timestamptz := clock_timestamp();
    body_text text := msg::text;
BEGIN
    IF @extschema@._pgq_unfit_for_xml(body_text) THEN
        PERFORM @extschema@._pgq_check_sends(ARRAY[msg], NULL);
    END IF;
    INSERT INTO @pgq@.pgq_message (msg_id, queue_id, message, enqueued_at, vt, expires_at)
    SELECT @next_msg_id:q@, q.id, send.msg, sent_at, sent_at, @expiry:q.retention|sent_at@
    FROM @pgq@.pgq_queue q
    WHERE q.name = send.queue_name AND q.max_length IS NULL AND q.delivery_delay <= 0
      AND (q.max_message_size >= 2147483647
           OR octet_length(send.msg::text) <= q.max_message_size)
    RETURNING msg_id, queue_id INTO new_id, target;
    IF new_id IS NULL THEN
        RETURN QUERY SELECT @extschema@._pgq_insert(@extschema@._pgq_queue(queue_name),
                                                    ARRAY[msg], ARRAY[NULL::jsonb], NULL);
        RETURN;
    END IF;
    @counter_insert@ VALUES (target, 'sent', 1, sent_at);
    PERFORM @notify:queue_name@;
    RETURN NEXT new_id;
END;
$$;

CREATE FUNCTION @extschema@.send(queue_name TEXT, msg JSONB, headers JSONB) RETURNS SETOF BIGINT
LANGUAGE sql AS $$ SELECT * FROM @extschema@._pgq_send_one($1, $2, $3, NULL) $$;

CREATE FUNCTION @extschema@.send(queue_name TEXT, msg JSONB, delay INTEGER) RETURNS SETOF BIGINT
LANGUAGE sql AS $$
    SELECT * FROM @extschema@._pgq_send_one($1, $2, NULL,
                                            clock_timestamp() + make_interval(secs => $3))
$$;

CREATE FUNCTION @extschema@.send(
    queue_name TEXT, msg JSONB, delay TIMESTAMP WITH TIME ZONE
) RETURNS SETOF BIGINT
LANGUAGE sql AS $$ SELECT * FROM @extschema@._pgq_send_one($1, $2, NULL, $3) $$;

CREATE FUNCTION @extschema@.send(queue_name TEXT, msg JSONB, headers JSONB, delay INTEGER)
RETURNS SETOF BIGINT
LANGUAGE sql AS $$
    SELECT * FROM @extschema@._pgq_send_one($1, $2, $3,
                                            clock_timestamp() + make_interval(secs => $4))
$$;

-- PGMQ's checks of a batch, with its texts.
CREATE FUNCTION @extschema@._validate_batch_params(msgs JSONB[], headers JSONB[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF msgs IS NULL OR array_length(msgs, 1) IS NULL THEN
        RAISE EXCEPTION 'msgs cannot be NULL or empty';
    END IF;
    IF headers IS NOT NULL
       AND COALESCE(array_length(headers, 1), 0) != COALESCE(array_length(msgs, 1), 0) THEN
        RAISE EXCEPTION 'headers array length (%) must match msgs array length (%)',
            COALESCE(array_length(headers, 1), 0), COALESCE(array_length(msgs, 1), 0);
    END IF;
END;
$$;

CREATE FUNCTION @extschema@.send_batch(
    queue_name TEXT, msgs JSONB[], headers JSONB[], delay TIMESTAMP WITH TIME ZONE
) RETURNS SETOF BIGINT
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM @extschema@._validate_batch_params(msgs, headers);
    RETURN QUERY SELECT @extschema@._pgq_insert(@extschema@._pgq_queue(queue_name), msgs,
                                                headers, delay);
END;
$$;

-- The usual batch, no headers and no delay, into a queue without bounds or a
-- delivery_delay: what the queue
-- decides (its id, its id sequence, the expiry) read once, then one INSERT that writes the
-- messages in array order (a scan of one unnest keeps it, so their ids rise in that order)
-- and returns their ids, then their counter row. The batch shares one send time, as
-- PGMQ's does. It skips the general way's per-message header and size work and its sorts,
-- a large share of a batch's time on the server (docs/pgmq.md, Speed). Any other queue
-- goes that way. The columns PGMQ does not set take the table's defaults; no statement
-- here prunes partitions, so no SET clause is needed to keep generic plans.
CREATE FUNCTION @extschema@.send_batch(queue_name TEXT, msgs JSONB[]) RETURNS SETOF BIGINT
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    target bigint;
    ids regclass;
    sent_at timestamptz := clock_timestamp();
    expires timestamptz;
    -- One text for the whole batch: JSON text neither starts nor ends with a backslash, so
    -- no escape spans two bodies.
    bodies_text text := array_to_string(msgs, ' ');
BEGIN
    IF msgs IS NULL OR array_length(msgs, 1) IS NULL THEN
        RAISE EXCEPTION 'msgs cannot be NULL or empty';
    END IF;
    IF @extschema@._pgq_unfit_for_xml(bodies_text) THEN
        PERFORM @extschema@._pgq_check_sends(msgs, NULL);
    END IF;
    SELECT q.id, @id_sequence:q@, @expiry:q.retention|sent_at@
    INTO target, ids, expires
    FROM @pgq@.pgq_queue q
    WHERE q.name = send_batch.queue_name AND q.max_length IS NULL AND q.delivery_delay <= 0
      AND q.max_message_size >= 2147483647;
    IF target IS NULL THEN
        RETURN QUERY SELECT @extschema@.send_batch(queue_name, msgs, NULL::jsonb[],
                                                   NULL::timestamptz);
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO @pgq@.pgq_message (msg_id, queue_id, message, enqueued_at, vt, expires_at)
    SELECT nextval(ids), target, b.body, sent_at, sent_at, expires
    FROM unnest(msgs) AS b(body)
    RETURNING msg_id;
    @counter_insert@ VALUES (target, 'sent', cardinality(msgs), sent_at);
    PERFORM @notify:queue_name@;
END;
$$;

CREATE FUNCTION @extschema@.send_batch(queue_name TEXT, msgs JSONB[], headers JSONB[])
RETURNS SETOF BIGINT
LANGUAGE sql AS $$ SELECT @extschema@.send_batch($1, $2, $3, NULL::timestamptz) $$;

CREATE FUNCTION @extschema@.send_batch(queue_name TEXT, msgs JSONB[], delay INTEGER)
RETURNS SETOF BIGINT
LANGUAGE sql AS $$
    SELECT @extschema@.send_batch($1, $2, NULL::jsonb[],
                                  clock_timestamp() + make_interval(secs => $3))
$$;

CREATE FUNCTION @extschema@.send_batch(
    queue_name TEXT, msgs JSONB[], delay TIMESTAMP WITH TIME ZONE
) RETURNS SETOF BIGINT
LANGUAGE sql AS $$ SELECT @extschema@.send_batch($1, $2, NULL::jsonb[], $3) $$;

CREATE FUNCTION @extschema@.send_batch(
    queue_name TEXT, msgs JSONB[], headers JSONB[], delay INTEGER
) RETURNS SETOF BIGINT
LANGUAGE sql AS $$
    SELECT @extschema@.send_batch($1, $2, $3, clock_timestamp() + make_interval(secs => $4))
$$;

------------------------------------------------------------------------------------------
-- Read, pop, delete, archive, visibility
------------------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.read(
    queue_name TEXT, vt INTEGER, qty INTEGER, conditional JSONB DEFAULT '{}'
) RETURNS SETOF @extschema@.message_record
LANGUAGE sql AS $$ SELECT * FROM @extschema@._pgq_lease(@extschema@._pgq_queue($1), $2, $3, $4) $$;

-- Polls in the server as PGMQ does (a function cannot LISTEN): each turn reads with a new
-- snapshot, so a send committed by any session, through either API, is seen on the next.
CREATE FUNCTION @extschema@.read_with_poll(
    queue_name TEXT,
    vt INTEGER,
    qty INTEGER,
    max_poll_seconds INTEGER DEFAULT 5,
    poll_interval_ms INTEGER DEFAULT 100,
    conditional JSONB DEFAULT '{}'
) RETURNS SETOF @extschema@.message_record
LANGUAGE plpgsql AS $$
DECLARE
    qrow @pgq@.pgq_queue := @extschema@._pgq_queue(queue_name);
    stop_at timestamptz := clock_timestamp() + make_interval(secs => max_poll_seconds);
BEGIN
    LOOP
        IF clock_timestamp() >= stop_at THEN
            RETURN;
        END IF;
        RETURN QUERY SELECT * FROM @extschema@._pgq_lease(qrow, vt, qty, conditional);
        IF FOUND THEN
            RETURN;
        END IF;
        PERFORM pg_sleep(poll_interval_ms::numeric / 1000);
    END LOOP;
END;
$$;

-- The Python API's pop: the messages a read would lease leave the queue at once (archived
-- as 'acked' when the queue archives on ack, with their last_read_at), counted.
CREATE FUNCTION @extschema@.pop(queue_name TEXT, qty INTEGER DEFAULT 1)
RETURNS SETOF @extschema@.message_record
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_sort = off AS $$
#variable_conflict use_column
DECLARE
    qrow @pgq@.pgq_queue := @extschema@._pgq_queue(queue_name);
BEGIN
    IF qrow.fifo THEN
        RETURN QUERY @store:pop_fifo|queue=qrow.name|qty=pop.qty@;
    ELSE
        RETURN QUERY @store:pop|queue=qrow.name|qty=pop.qty@;
    END IF;
END;
$$;

-- The usual ack as the Python API's (ACK_ONE: one DELETE that finds its queue by the
-- unique name), with its counter row; any other case (another spelling, archive_on_ack, a
-- message not there, no such queue) goes the general way of _pgq_remove.
CREATE FUNCTION @extschema@.delete(queue_name TEXT, msg_id BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    acked_id bigint;
    found_queue bigint;
BEGIN
    @store:ack_one|queue=delete.queue_name|msg_id=delete.msg_id@ INTO acked_id, found_queue;
    IF found_queue IS NOT NULL THEN
        @counter_insert@ VALUES (found_queue, 'acked', 1, clock_timestamp());
        RETURN true;
    END IF;
    RETURN EXISTS (SELECT FROM @extschema@._pgq_remove(@extschema@._pgq_queue(queue_name),
                                                       ARRAY[msg_id], false));
END;
$$;

CREATE FUNCTION @extschema@.delete(queue_name TEXT, msg_ids BIGINT[]) RETURNS SETOF BIGINT
LANGUAGE sql AS $$ SELECT @extschema@._pgq_remove(@extschema@._pgq_queue($1), $2, false) $$;

CREATE FUNCTION @extschema@.archive(queue_name TEXT, msg_id BIGINT) RETURNS BOOLEAN
LANGUAGE sql AS $$
    SELECT EXISTS (SELECT FROM @extschema@._pgq_remove(@extschema@._pgq_queue($1), ARRAY[$2], true))
$$;

CREATE FUNCTION @extschema@.archive(queue_name TEXT, msg_ids BIGINT[]) RETURNS SETOF BIGINT
LANGUAGE sql AS $$ SELECT @extschema@._pgq_remove(@extschema@._pgq_queue($1), $2, true) $$;

CREATE FUNCTION @extschema@.set_vt(queue_name TEXT, msg_id BIGINT, vt TIMESTAMP WITH TIME ZONE)
RETURNS SETOF @extschema@.message_record
LANGUAGE sql AS $$ SELECT * FROM @extschema@._pgq_set_vt(@extschema@._pgq_queue($1), ARRAY[$2], $3) $$;

CREATE FUNCTION @extschema@.set_vt(queue_name TEXT, msg_id BIGINT, vt INTEGER)
RETURNS SETOF @extschema@.message_record
LANGUAGE sql AS $$
    SELECT * FROM @extschema@._pgq_set_vt(@extschema@._pgq_queue($1), ARRAY[$2],
                                          clock_timestamp() + make_interval(secs => $3))
$$;

CREATE FUNCTION @extschema@.set_vt(
    queue_name TEXT, msg_ids BIGINT[], vt TIMESTAMP WITH TIME ZONE
) RETURNS SETOF @extschema@.message_record
LANGUAGE sql AS $$ SELECT * FROM @extschema@._pgq_set_vt(@extschema@._pgq_queue($1), $2, $3) $$;

CREATE FUNCTION @extschema@.set_vt(queue_name TEXT, msg_ids BIGINT[], vt INTEGER)
RETURNS SETOF @extschema@.message_record
LANGUAGE sql AS $$
    SELECT * FROM @extschema@._pgq_set_vt(@extschema@._pgq_queue($1), $2,
                                          clock_timestamp() + make_interval(secs => $3))
$$;

------------------------------------------------------------------------------------------
-- FIFO grouped reads: the group is headers->>'x-pgmq-group' (kept as the message group),
-- messages without one form the group '_default_fifo_group'.
------------------------------------------------------------------------------------------

-- SQS FIFO-style: fill the batch from the group whose head is oldest, then the next. A
-- group takes part only if its visible head is its oldest message (nothing earlier leased).
CREATE FUNCTION @extschema@.read_grouped(queue_name TEXT, vt INTEGER, qty INTEGER)
RETURNS SETOF @extschema@.message_record
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    qrow @pgq@.pgq_queue := @extschema@._pgq_queue(queue_name);
    chosen bigint[];
BEGIN
    IF qrow.paused THEN
        RETURN;
    END IF;
    WITH heads AS (
        SELECT coalesce(m.group_id, '_default_fifo_group') AS grp, min(m.msg_id) AS head
        FROM @pgq@.pgq_message m WHERE m.queue_id = qrow.id
        GROUP BY 1
    ), free AS (
        SELECT h.grp, h.head FROM heads h
        JOIN @pgq@.pgq_message m ON m.msg_id = h.head AND m.queue_id = qrow.id
        WHERE m.vt <= clock_timestamp()
    ), ranked AS (
        SELECT m.msg_id,
               row_number() OVER (ORDER BY f.head, m.msg_id) AS n
        FROM free f
        CROSS JOIN LATERAL (
            SELECT m.msg_id FROM @pgq@.pgq_message m
            WHERE m.queue_id = qrow.id AND coalesce(m.group_id, '_default_fifo_group') = f.grp
              AND m.vt <= clock_timestamp()
            ORDER BY m.msg_id LIMIT qty
        ) m
    ), locked AS (
        SELECT m.msg_id FROM @pgq@.pgq_message m JOIN ranked r ON r.msg_id = m.msg_id
        WHERE r.n <= qty ORDER BY m.msg_id FOR UPDATE OF m SKIP LOCKED
    )
    SELECT array_agg(msg_id ORDER BY msg_id) INTO chosen FROM locked;
    RETURN QUERY SELECT * FROM @extschema@._pgq_lease_ids(qrow, vt, chosen);
END;
$$;

-- Round robin: the first visible message of every free group, then the second, and so on.
CREATE FUNCTION @extschema@.read_grouped_rr(queue_name TEXT, vt INTEGER, qty INTEGER)
RETURNS SETOF @extschema@.message_record
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    qrow @pgq@.pgq_queue := @extschema@._pgq_queue(queue_name);
    chosen bigint[];
BEGIN
    IF qrow.paused THEN
        RETURN;
    END IF;
    WITH heads AS (
        SELECT coalesce(m.group_id, '_default_fifo_group') AS grp, min(m.msg_id) AS head
        FROM @pgq@.pgq_message m WHERE m.queue_id = qrow.id
        GROUP BY 1
    ), free AS (
        SELECT h.grp, h.head, row_number() OVER (ORDER BY h.head) AS priority FROM heads h
        JOIN @pgq@.pgq_message m ON m.msg_id = h.head AND m.queue_id = qrow.id
        WHERE m.vt <= clock_timestamp()
          AND pg_try_advisory_xact_lock(pg_catalog.hashtextextended(h.grp, 0))
    ), ranked AS (
        SELECT m.msg_id,
               row_number() OVER (ORDER BY m.rank_in_group, f.priority) AS n
        FROM free f
        CROSS JOIN LATERAL (
            SELECT m.msg_id, row_number() OVER (ORDER BY m.msg_id) AS rank_in_group
            FROM @pgq@.pgq_message m
            WHERE m.queue_id = qrow.id AND coalesce(m.group_id, '_default_fifo_group') = f.grp
              AND m.vt <= clock_timestamp() AND m.msg_id >= f.head
        ) m
    ), locked AS (
        SELECT r.msg_id, r.n FROM @pgq@.pgq_message m JOIN ranked r ON r.msg_id = m.msg_id
        WHERE r.n <= qty ORDER BY r.n FOR UPDATE OF m SKIP LOCKED
    )
    SELECT array_agg(msg_id ORDER BY n) INTO chosen FROM locked;
    RETURN QUERY SELECT * FROM @extschema@._pgq_lease_ids(qrow, vt, chosen);
END;
$$;

-- The head of up to qty groups, oldest head first.
CREATE FUNCTION @extschema@.read_grouped_head(queue_name TEXT, vt INTEGER, qty INTEGER)
RETURNS SETOF @extschema@.message_record
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    qrow @pgq@.pgq_queue := @extschema@._pgq_queue(queue_name);
    chosen bigint[];
BEGIN
    IF qrow.paused THEN
        RETURN;
    END IF;
    WITH heads AS (
        SELECT min(m.msg_id) AS head
        FROM @pgq@.pgq_message m WHERE m.queue_id = qrow.id
        GROUP BY coalesce(m.group_id, '_default_fifo_group')
    ), locked AS (
        SELECT m.msg_id FROM heads h JOIN @pgq@.pgq_message m ON m.msg_id = h.head
        WHERE m.queue_id = qrow.id AND m.vt <= clock_timestamp()
        ORDER BY m.msg_id LIMIT qty FOR UPDATE OF m SKIP LOCKED
    )
    SELECT array_agg(msg_id ORDER BY msg_id) INTO chosen FROM locked;
    RETURN QUERY SELECT * FROM @extschema@._pgq_lease_ids(qrow, vt, chosen);
END;
$$;

-- The three grouped reads' _with_poll forms: one loop, the read chosen by ``kind``.
CREATE FUNCTION @extschema@._pgq_poll_grouped(
    kind TEXT, queue_name TEXT, vt INTEGER, qty INTEGER,
    max_poll_seconds INTEGER, poll_interval_ms INTEGER
) RETURNS SETOF @extschema@.message_record
LANGUAGE plpgsql AS $$
DECLARE
    stop_at timestamptz := clock_timestamp() + make_interval(secs => max_poll_seconds);
BEGIN
    LOOP
        IF clock_timestamp() >= stop_at THEN
            RETURN;
        END IF;
        IF kind = 'rr' THEN
            RETURN QUERY SELECT * FROM @extschema@.read_grouped_rr(queue_name, vt, qty);
        ELSIF kind = 'head' THEN
            RETURN QUERY SELECT * FROM @extschema@.read_grouped_head(queue_name, vt, qty);
        ELSE
            RETURN QUERY SELECT * FROM @extschema@.read_grouped(queue_name, vt, qty);
        END IF;
        IF FOUND THEN
            RETURN;
        END IF;
        PERFORM pg_sleep(poll_interval_ms::numeric / 1000);
    END LOOP;
END;
$$;

CREATE FUNCTION @extschema@.read_grouped_with_poll(
    queue_name TEXT, vt INTEGER, qty INTEGER,
    max_poll_seconds INTEGER DEFAULT 5, poll_interval_ms INTEGER DEFAULT 100
) RETURNS SETOF @extschema@.message_record
LANGUAGE sql AS $$
    SELECT * FROM @extschema@._pgq_poll_grouped(
        'fifo', queue_name, vt, qty, max_poll_seconds, poll_interval_ms)
$$;

CREATE FUNCTION @extschema@.read_grouped_rr_with_poll(
    queue_name TEXT, vt INTEGER, qty INTEGER,
    max_poll_seconds INTEGER DEFAULT 5, poll_interval_ms INTEGER DEFAULT 100
) RETURNS SETOF @extschema@.message_record
LANGUAGE sql AS $$
    SELECT * FROM @extschema@._pgq_poll_grouped(
        'rr', queue_name, vt, qty, max_poll_seconds, poll_interval_ms)
$$;

CREATE FUNCTION @extschema@.read_grouped_head_with_poll(
    queue_name TEXT, vt INTEGER, qty INTEGER,
    max_poll_seconds INTEGER DEFAULT 5, poll_interval_ms INTEGER DEFAULT 100
) RETURNS SETOF @extschema@.message_record
LANGUAGE sql AS $$
    SELECT * FROM @extschema@._pgq_poll_grouped(
        'head', queue_name, vt, qty, max_poll_seconds, poll_interval_ms)
$$;

------------------------------------------------------------------------------------------
-- Insert notifications (PGMQ's channel: 'pgmq.q_<name>.INSERT', no payload)
------------------------------------------------------------------------------------------

-- PGMQ's trigger function, kept for its name; our trigger runs _pgq_notify_insert.
CREATE FUNCTION @extschema@.notify_queue_listeners() RETURNS TRIGGER
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgmq.' || TG_TABLE_NAME || '.' || TG_OP, NULL);
    RETURN NEW;
END;
$$;

CREATE FUNCTION @extschema@.disable_notify_insert(queue_name TEXT) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM @extschema@.notify_insert_throttle t
    WHERE t.queue_id = (@extschema@._pgq_queue(disable_notify_insert.queue_name)).id;
    -- The trigger on pgq_message lives only while some queue needs it.
    IF NOT EXISTS (SELECT 1 FROM @extschema@.notify_insert_throttle) THEN
        DROP TRIGGER IF EXISTS pgq_pgmq_notify_insert ON @pgq@.pgq_message;
    END IF;
END;
$$;

CREATE FUNCTION @extschema@.enable_notify_insert(
    queue_name TEXT, throttle_interval_ms INTEGER DEFAULT 250
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    qrow @pgq@.pgq_queue;
BEGIN
    IF throttle_interval_ms < 0 THEN
        RAISE EXCEPTION 'throttle_interval_ms must be non-negative';
    END IF;
    BEGIN
        qrow := @extschema@._pgq_queue(queue_name);
    EXCEPTION WHEN undefined_table THEN
        RAISE EXCEPTION 'Queue "%" does not exist. Create it first using pgmq.create()', queue_name;
    END;
    INSERT INTO @extschema@.notify_insert_throttle AS t (queue_id, queue_name, throttle_interval_ms)
    VALUES (qrow.id, qrow.name, enable_notify_insert.throttle_interval_ms)
    ON CONFLICT (queue_id) DO UPDATE
        SET throttle_interval_ms = EXCLUDED.throttle_interval_ms,
            last_notified_at = to_timestamp(0);
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = '@pgq@.pgq_message'::regclass
                     AND tgname = 'pgq_pgmq_notify_insert') THEN
        CREATE TRIGGER pgq_pgmq_notify_insert AFTER INSERT ON @pgq@.pgq_message
            FOR EACH ROW EXECUTE FUNCTION @extschema@._pgq_notify_insert();
    END IF;
END;
$$;

CREATE FUNCTION @extschema@.update_notify_insert(queue_name text, throttle_interval_ms integer)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    qrow @pgq@.pgq_queue;
BEGIN
    IF throttle_interval_ms < 0 THEN
        RAISE EXCEPTION 'throttle_interval_ms must be non-negative, got: %', throttle_interval_ms;
    END IF;
    BEGIN
        qrow := @extschema@._pgq_queue(queue_name);
    EXCEPTION WHEN undefined_table THEN
        RAISE EXCEPTION 'Queue "%" does not exist. Create the queue first using pgmq.create()', queue_name;
    END;
    UPDATE @extschema@.notify_insert_throttle t
    SET throttle_interval_ms = update_notify_insert.throttle_interval_ms,
        last_notified_at = to_timestamp(0)
    WHERE t.queue_id = qrow.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'Queue "%" does not have notify_insert enabled. Enable it first using pgmq.enable_notify_insert()', queue_name;
    END IF;
END;
$$;

CREATE FUNCTION @extschema@.list_notify_insert_throttles()
RETURNS TABLE (queue_name text, throttle_interval_ms integer, last_notified_at TIMESTAMP WITH TIME ZONE)
LANGUAGE sql STABLE AS $$
    SELECT t.queue_name, t.throttle_interval_ms, t.last_notified_at
    FROM @extschema@.notify_insert_throttle t ORDER BY t.queue_name
$$;

------------------------------------------------------------------------------------------
-- Topics: bindings of the 'pgmq_topics' topic exchange
------------------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.validate_routing_key(routing_key text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF routing_key IS NULL OR routing_key = '' THEN
        RAISE EXCEPTION 'routing_key cannot be NULL or empty';
    END IF;
    IF length(routing_key) > 255 THEN
        RAISE EXCEPTION 'routing_key length cannot exceed 255 characters, got % characters', length(routing_key);
    END IF;
    IF routing_key !~ '^[a-zA-Z0-9._-]+$' THEN
        RAISE EXCEPTION 'routing_key contains invalid characters. Only alphanumeric, dots, hyphens, and underscores are allowed. Got: %', routing_key;
    END IF;
    IF routing_key ~ '^\.' THEN
        RAISE EXCEPTION 'routing_key cannot start with a dot. Got: %', routing_key;
    END IF;
    IF routing_key ~ '\.$' THEN
        RAISE EXCEPTION 'routing_key cannot end with a dot. Got: %', routing_key;
    END IF;
    IF routing_key ~ '\.\.' THEN
        RAISE EXCEPTION 'routing_key cannot contain consecutive dots. Got: %', routing_key;
    END IF;
    RETURN true;
END;
$$;

CREATE FUNCTION @extschema@.validate_topic_pattern(pattern text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF pattern IS NULL OR pattern = '' THEN
        RAISE EXCEPTION 'pattern cannot be NULL or empty';
    END IF;
    IF length(pattern) > 255 THEN
        RAISE EXCEPTION 'pattern length cannot exceed 255 characters, got % characters', length(pattern);
    END IF;
    IF pattern !~ '^[a-zA-Z0-9._\-*#]+$' THEN
        RAISE EXCEPTION 'pattern contains invalid characters. Only alphanumeric, dots, hyphens, underscores, *, and # are allowed. Got: %', pattern;
    END IF;
    IF pattern ~ '^\.' THEN
        RAISE EXCEPTION 'pattern cannot start with a dot. Got: %', pattern;
    END IF;
    IF pattern ~ '\.$' THEN
        RAISE EXCEPTION 'pattern cannot end with a dot. Got: %', pattern;
    END IF;
    IF pattern ~ '\.\.' THEN
        RAISE EXCEPTION 'pattern cannot contain consecutive dots. Got: %', pattern;
    END IF;
    IF pattern ~ '\*\*' THEN
        RAISE EXCEPTION 'pattern cannot contain consecutive stars (**). Use # for multi-segment matching. Got: %', pattern;
    END IF;
    IF pattern ~ '##' THEN
        RAISE EXCEPTION 'pattern cannot contain consecutive hashes (##). A single # already matches zero or more segments. Got: %', pattern;
    END IF;
    IF pattern ~ '\*#' OR pattern ~ '#\*' THEN
        RAISE EXCEPTION 'pattern cannot contain adjacent wildcards (*# or #*). Separate wildcards with dots. Got: %', pattern;
    END IF;
    RETURN true;
END;
$$;

CREATE FUNCTION @extschema@.bind_topic(pattern text, queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    qrow @pgq@.pgq_queue;
BEGIN
    PERFORM @extschema@.validate_topic_pattern(pattern);
    IF queue_name IS NULL OR queue_name = '' THEN
        RAISE EXCEPTION 'queue_name cannot be NULL or empty';
    END IF;
    SELECT * INTO qrow FROM @pgq@.pgq_queue q WHERE q.name = bind_topic.queue_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'Queue "%" does not exist. Create the queue first using pgmq.create()', queue_name;
    END IF;
    INSERT INTO @pgq@.pgq_binding (exchange_id, queue_id, routing_key, key_pattern, filters, created_at)
    VALUES (@extschema@._pgq_topics(), qrow.id, pattern, @extschema@._pgq_amqp_regex(pattern),
            '{}'::jsonb, now())
    ON CONFLICT (exchange_id, queue_id, routing_key) DO NOTHING;
END;
$$;

CREATE FUNCTION @extschema@.unbind_topic(pattern text, queue_name text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF pattern IS NULL OR pattern = '' THEN
        RAISE EXCEPTION 'pattern cannot be NULL or empty';
    END IF;
    IF queue_name IS NULL OR queue_name = '' THEN
        RAISE EXCEPTION 'queue_name cannot be NULL or empty';
    END IF;
    DELETE FROM @pgq@.pgq_binding b
    USING @pgq@.pgq_exchange e, @pgq@.pgq_queue q
    WHERE e.id = b.exchange_id AND e.name = 'pgmq_topics'
      AND q.id = b.queue_id AND q.name = unbind_topic.queue_name
      AND b.routing_key = unbind_topic.pattern;
    RETURN FOUND;
END;
$$;

CREATE FUNCTION @extschema@.test_routing(routing_key text)
RETURNS TABLE (pattern text, queue_name text, compiled_regex text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM @extschema@.validate_routing_key(routing_key);
    RETURN QUERY
    SELECT b.pattern, b.queue_name, b.compiled_regex
    FROM @extschema@.topic_bindings b
    WHERE test_routing.routing_key ~ b.compiled_regex
    ORDER BY b.pattern;
END;
$$;

CREATE FUNCTION @extschema@.list_topic_bindings()
RETURNS TABLE (pattern text, queue_name text, bound_at TIMESTAMP WITH TIME ZONE, compiled_regex text)
LANGUAGE sql STABLE AS $$
    SELECT b.pattern, b.queue_name, b.bound_at, b.compiled_regex
    FROM @extschema@.topic_bindings b
    ORDER BY b.bound_at DESC, b.pattern, b.queue_name
$$;

CREATE FUNCTION @extschema@.list_topic_bindings(queue_name text)
RETURNS TABLE (pattern text, queue_name text, bound_at TIMESTAMP WITH TIME ZONE, compiled_regex text)
LANGUAGE sql STABLE AS $$
    SELECT b.pattern, b.queue_name, b.bound_at, b.compiled_regex
    FROM @extschema@.topic_bindings b
    WHERE b.queue_name = $1
    ORDER BY b.bound_at DESC, b.pattern
$$;

CREATE FUNCTION @extschema@.send_topic(routing_key text, msg jsonb, headers jsonb, delay integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    target record;
    matched integer := 0;
BEGIN
    PERFORM @extschema@.validate_routing_key(routing_key);
    IF msg IS NULL THEN
        RAISE EXCEPTION 'msg cannot be NULL';
    END IF;
    IF delay < 0 THEN
        RAISE EXCEPTION 'delay cannot be negative, got: %', delay;
    END IF;
    FOR target IN
        SELECT DISTINCT b.queue_name FROM @extschema@.topic_bindings b
        WHERE send_topic.routing_key ~ b.compiled_regex
        ORDER BY b.queue_name
    LOOP
        PERFORM @extschema@.send(target.queue_name, msg, headers, delay);
        matched := matched + 1;
    END LOOP;
    RETURN matched;
END;
$$;

CREATE FUNCTION @extschema@.send_topic(routing_key text, msg jsonb) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN @extschema@.send_topic(routing_key, msg, NULL, 0);
END;
$$;

CREATE FUNCTION @extschema@.send_topic(routing_key text, msg jsonb, delay integer) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN @extschema@.send_topic(routing_key, msg, NULL, delay);
END;
$$;

CREATE FUNCTION @extschema@.send_batch_topic(
    routing_key text, msgs jsonb[], headers jsonb[], delay TIMESTAMP WITH TIME ZONE
) RETURNS TABLE (queue_name text, msg_id bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    target record;
BEGIN
    PERFORM @extschema@.validate_routing_key(routing_key);
    PERFORM @extschema@._validate_batch_params(msgs, headers);
    FOR target IN
        SELECT DISTINCT b.queue_name FROM @extschema@.topic_bindings b
        WHERE send_batch_topic.routing_key ~ b.compiled_regex
        ORDER BY b.queue_name
    LOOP
        RETURN QUERY
        SELECT target.queue_name, sent.id
        FROM @extschema@._pgq_insert(@extschema@._pgq_queue(target.queue_name), msgs, headers,
                                     delay) AS sent(id);
    END LOOP;
END;
$$;

CREATE FUNCTION @extschema@.send_batch_topic(routing_key text, msgs jsonb[])
RETURNS TABLE (queue_name text, msg_id bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM @extschema@.send_batch_topic($1, $2, NULL::jsonb[], clock_timestamp())
$$;

CREATE FUNCTION @extschema@.send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[])
RETURNS TABLE (queue_name text, msg_id bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM @extschema@.send_batch_topic($1, $2, $3, clock_timestamp())
$$;

CREATE FUNCTION @extschema@.send_batch_topic(routing_key text, msgs jsonb[], delay integer)
RETURNS TABLE (queue_name text, msg_id bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM @extschema@.send_batch_topic($1, $2, NULL::jsonb[],
                                               clock_timestamp() + make_interval(secs => $3))
$$;

CREATE FUNCTION @extschema@.send_batch_topic(
    routing_key text, msgs jsonb[], delay TIMESTAMP WITH TIME ZONE
) RETURNS TABLE (queue_name text, msg_id bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM @extschema@.send_batch_topic($1, $2, NULL::jsonb[], $3)
$$;

CREATE FUNCTION @extschema@.send_batch_topic(
    routing_key text, msgs jsonb[], headers jsonb[], delay integer
) RETURNS TABLE (queue_name text, msg_id bigint)
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM @extschema@.send_batch_topic($1, $2, $3,
                                               clock_timestamp() + make_interval(secs => $4))
$$;

-- The views of every queue there is (later ones come from the trigger on pgq_queue).
DO $$
BEGIN
    PERFORM @extschema@._pgq_make_views(q.id, q.name) FROM @pgq@.pgq_queue q;
END;
$$;

-- What exists now (later views get it from the schema's default privileges).
GRANT SELECT ON ALL TABLES IN SCHEMA @extschema@ TO pg_monitor;
