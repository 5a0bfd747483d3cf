-- PGMQ 1.13.0's SQL surface over pgq_django's tables: types, the meta view, the helpers.
--
-- Placeholders, filled by pgq_django.pgmq.install before this runs (identifiers quoted,
-- the channel a literal): @extschema@ the schema made here (PGQ["PGMQ_SCHEMA"]), @pgq@ the
-- schema holding pgq_django's tables, @channel@ PGQ["NOTIFY_CHANNEL"], @forever@ the longest
-- retention (seconds): a queue with it keeps its messages until they are taken, and they
-- carry no expiry; @reserved_prefix@ and @not_xml@ the store's text rules (below).
--
-- Every rule about messages that the store owns comes in as the store's own text, from
-- pgq_django.store.sql (pgmq_interface.render): a "store" placeholder is a whole statement
-- the Python API runs (with "|param=expr" giving one of its parameters), and the fragment
-- placeholders are its pieces: next_msg_id and id_sequence (a queue's id space), expiry,
-- counter_insert and counter_total (a queue's counted events), notify (the wake-up of a
-- queue's listeners), has_room (max_length) and insert_messages (a new message's columns).
--
-- The functions that read or write messages plan their statements once per session
-- (plan_cache_mode = force_generic_plan). Left to choose, PostgreSQL re-plans them on every
-- call, because a plan for one queue's id looks no cheaper than the generic one, and planning
-- a statement over the partitions of pgq_message costs several times what running it does.
--
-- Nothing here owns a message: every function reads and writes pgq_queue, pgq_message,
-- pgq_archived_message, pgq_queue_counter and the exchange tables, as the Python API does.

CREATE SCHEMA @extschema@;
COMMENT ON SCHEMA @extschema@ IS 'pgq_django: the PGMQ SQL interface over pgq_django''s tables';

-- The record types, field for field as PGMQ declares them (their column order is API).
CREATE TYPE @extschema@.message_record AS (
    msg_id BIGINT,
    read_ct INTEGER,
    enqueued_at TIMESTAMP WITH TIME ZONE,
    last_read_at TIMESTAMP WITH TIME ZONE,
    vt TIMESTAMP WITH TIME ZONE,
    message JSONB,
    headers JSONB
);

CREATE TYPE @extschema@.queue_record AS (
    queue_name VARCHAR,
    is_partitioned BOOLEAN,
    is_unlogged BOOLEAN,
    created_at TIMESTAMP WITH TIME ZONE
);

CREATE TYPE @extschema@.metrics_result AS (
    queue_name text,
    queue_length bigint,
    newest_msg_age_sec int,
    oldest_msg_age_sec int,
    total_messages bigint,
    scrape_time timestamp with time zone,
    queue_visible_length bigint,
    default_partition_length bigint
);

-- Every queue, whichever API made it. No queue is partitioned on its own (all share the
-- msg_id-range partitions of pgq_message); a non-durable queue is PGMQ's unlogged one.
CREATE VIEW @extschema@.meta AS
SELECT q.name::varchar AS queue_name,
       false AS is_partitioned,
       NOT q.durable AS is_unlogged,
       q.created_at
FROM @pgq@.pgq_queue q;

-- PGMQ lets pg_monitor read its schema (metrics scrapers); so do we, views included.
GRANT USAGE ON SCHEMA @extschema@ TO pg_monitor;
ALTER DEFAULT PRIVILEGES IN SCHEMA @extschema@ GRANT SELECT ON TABLES TO pg_monitor;

-- Which queues wake PGMQ listeners on insert, and how often at most (enable_notify_insert).
-- Keyed by queue id, so a drop through either API removes the row (trigger below).
CREATE UNLOGGED TABLE @extschema@.notify_insert_throttle (
    queue_id bigint PRIMARY KEY,
    queue_name text NOT NULL,
    throttle_interval_ms integer NOT NULL DEFAULT 0,
    last_notified_at timestamptz NOT NULL DEFAULT to_timestamp(0)
);

-- The queue a PGMQ call names: the exact name first, else the one whose name is equal
-- ignoring case (PGMQ's tables are the lower-cased name, so 'Orders' and 'orders' are one
-- queue). A name PGMQ would refuse, or no queue, raises PGMQ's own errors.
CREATE FUNCTION @extschema@._pgq_queue(queue_name text) RETURNS @pgq@.pgq_queue
LANGUAGE plpgsql STABLE AS $$
DECLARE
    qrow @pgq@.pgq_queue;
BEGIN
    IF queue_name ~ '\$|;|--|''' THEN
        RAISE EXCEPTION 'queue name contains invalid characters: $, ;, --, or \''';
    END IF;
    SELECT * INTO qrow FROM @pgq@.pgq_queue q WHERE q.name = _pgq_queue.queue_name;
    IF NOT FOUND THEN
        SELECT * INTO qrow FROM @pgq@.pgq_queue q
        WHERE lower(q.name) = lower(_pgq_queue.queue_name) ORDER BY q.id LIMIT 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'relation "@extschema@.%" does not exist',
                lower('q_' || queue_name) USING ERRCODE = 'undefined_table';
        END IF;
    END IF;
    RETURN qrow;
END;
$$;

-- The message records of rows, as PGMQ shows them: headers never set read NULL.
CREATE FUNCTION @extschema@._pgq_headers(headers jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT NULLIF(headers, '{}'::jsonb) $$;

-- Whether the JSON text of a body or headers holds a character XML cannot carry: a cheap
-- look first, for a backslash (a control character's escape) or the UTF-8 bytes every
-- character from U+FFC0 to U+FFFF starts with (U+FFFE and U+FFFF among them; a byte search
-- is several times faster than a character search for them), then
-- pgq_django.validation.NOT_XML_IN_JSON, the pattern the Python API checks with, to be sure.
-- Written as one expression, so that it is inlined where it is used; callers pass a
-- variable, since an inlined expression argument would be evaluated once per use.
CREATE FUNCTION @extschema@._pgq_unfit_for_xml(json_text text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (strpos(json_text, chr(92)) > 0
            OR position('\xefbf'::bytea IN textsend(json_text)) > 0)
           AND json_text ~ @not_xml@
$$;

-- The rules every door applies to what a send writes (pgq_django.validation's), for PGMQ's
-- sends: header keys starting with @reserved_prefix@, in any case, are the server's own
-- records (a reply's address, a request's correlation id, a dead letter's history), which
-- workers and readers trust, so no sender may write one; and text XML cannot carry, which
-- SQS refuses, could not reach an SQS client of the Query protocol. Raises; nothing is sent.
CREATE FUNCTION @extschema@._pgq_check_sends(msgs jsonb[], headers jsonb[]) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    reserved text;
BEGIN
    SELECT string_agg(DISTINCT quote_literal(k), ', ') INTO reserved
    FROM unnest(headers) AS h(header),
         jsonb_object_keys(CASE WHEN jsonb_typeof(h.header) = 'object' THEN h.header END) AS k
    WHERE starts_with(lower(k), @reserved_prefix@);
    IF reserved IS NOT NULL THEN
        RAISE EXCEPTION 'header keys starting with % are reserved for pgq_django''s own records; rename %',
            quote_literal(@reserved_prefix@), reserved
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(msgs, headers) AS b(body, header)
               WHERE @extschema@._pgq_unfit_for_xml(b.body::text)
                  OR @extschema@._pgq_unfit_for_xml(b.header::text)) THEN
        RAISE EXCEPTION 'a message or its headers hold a character XML cannot carry (allowed: #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to #x10FFFF)'
            USING ERRCODE = 'character_not_in_repertoire',
                  HINT = 'SQS refuses such text, and its Query-protocol clients could not read it.';
    END IF;
END;
$$;

-- Insert messages (in array order) into queue q, visible at ``visible_at`` (without it,
-- after the queue's delivery_delay); PGMQ headers are kept as headers and 'x-pgmq-group'
-- becomes the message group. Writes each message as the Python API's send does, counts
-- the sends for pgq_django's metrics and wakes pgq_django's own waiters (its notify
-- channel) when the messages are visible at once.
CREATE FUNCTION @extschema@._pgq_insert(
    q @pgq@.pgq_queue, msgs jsonb[], headers jsonb[], visible_at timestamptz
) RETURNS SETOF bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    size_limit bigint := q.max_message_size;
    -- The send's delay, in seconds, as the Python API's sends give it (NULL: none given).
    p_delay float8 := extract(epoch FROM visible_at - clock_timestamp());
BEGIN
    PERFORM @extschema@._pgq_check_sends(msgs, headers);
    -- A queue given max_length through the Python API stays bounded for PGMQ's sends too.
    IF NOT @has_room:q|cardinality(msgs)@ THEN
        RAISE EXCEPTION 'queue "%" is full: it holds at most % messages (max_length)',
            q.name, q.max_length USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF q.max_message_size < 2147483647 AND EXISTS (
        SELECT 1 FROM unnest(msgs) AS b(body) WHERE octet_length(b.body::text) > size_limit
    ) THEN
        RAISE EXCEPTION 'message is larger than the queue''s max_message_size (% bytes)', size_limit
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN QUERY
    WITH ins AS (
        @insert_messages:q|b.body@
        -- Pairs each body with its headers (NULL when there are none: every caller has
        -- checked that a headers array is as long as msgs).
        FROM unnest(msgs, headers) WITH ORDINALITY AS b(body, header, n)
        ORDER BY b.n
        RETURNING msg_id
    ), counted AS (
        @counter_insert@
        SELECT q.id, 'sent', count(*), clock_timestamp() FROM ins HAVING count(*) > 0
    )
    SELECT msg_id FROM ins ORDER BY msg_id;
    IF coalesce(p_delay, q.delivery_delay) <= 0 THEN
        PERFORM @notify:q.name@;
    END IF;
END;
$$;

-- One message into the queue named exactly ``queue_name``: the usual send, as an INSERT that
-- finds its queue by the unique name, then its counter row and the wake-up. The columns it
-- leaves out take the table's defaults (empty attributes, priority 0, never read). A queue
-- it cannot serve so (another spelling of the name, max_length, a body over
-- max_message_size, a delivery_delay and no delay given, no such queue) goes the general
-- way of _pgq_insert, which says why or delays the message.
--
-- Two plain statements cost the server less than one with a data-modifying CTE, and no
-- per-call SET clause is needed: neither statement prunes partitions, so the generic plan
-- the plan cache settles on is the one a forced plan would give.
CREATE FUNCTION @extschema@._pgq_send_one(
    queue_name text, msg jsonb, headers jsonb, visible_at timestamptz
) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    target bigint;
    sent_at timestamptz := clock_timestamp();
    body_text text;
BEGIN
    IF _pgq_send_one.headers IS NOT NULL THEN
        PERFORM @extschema@._pgq_check_sends(ARRAY[msg], ARRAY[_pgq_send_one.headers]);
    ELSE
        body_text := msg::text;
        IF @extschema@._pgq_unfit_for_xml(body_text) THEN
            PERFORM @extschema@._pgq_check_sends(ARRAY[msg], NULL);
        END IF;
    END IF;
    INSERT INTO @pgq@.pgq_message (msg_id, queue_id, message, headers, enqueued_at, vt,
                                   expires_at, group_id)
    SELECT @next_msg_id:q@,
           q.id, _pgq_send_one.msg, coalesce(_pgq_send_one.headers, '{}'::jsonb), sent_at,
           coalesce(visible_at, sent_at),
           @expiry:q.retention|sent_at@,
           CASE WHEN jsonb_typeof(_pgq_send_one.headers) = 'object'
                THEN _pgq_send_one.headers->>'x-pgmq-group' END
    FROM @pgq@.pgq_queue q
    WHERE q.name = _pgq_send_one.queue_name AND q.max_length IS NULL
      AND (visible_at IS NOT NULL OR q.delivery_delay <= 0)
      AND (q.max_message_size >= 2147483647
           OR octet_length(_pgq_send_one.msg::text) <= q.max_message_size)
    RETURNING msg_id, queue_id INTO new_id, target;
    IF new_id IS NULL THEN
        RETURN QUERY SELECT @extschema@._pgq_insert(@extschema@._pgq_queue(queue_name),
                                                    ARRAY[msg], ARRAY[headers], visible_at);
        RETURN;
    END IF;
    @counter_insert@ VALUES (target, 'sent', 1, sent_at);
    IF visible_at IS NULL OR visible_at <= sent_at THEN
        PERFORM @notify:queue_name@;
    END IF;
    RETURN NEXT new_id;
END;
$$;

-- Lease up to p_qty visible messages of queue qrow for p_vt seconds (NULL: the queue's
-- visibility timeout), as the Python API's read leases them, each only if p_conditional
-- is '{}' or its body contains it: best first (priority, then msg_id: PGMQ's msg_id
-- order, since PGMQ's queues have one priority); no expired message and nothing from a
-- paused queue; on a FIFO queue the head of each group with the run of the group's
-- messages behind it; a queue's rate and concurrency limits taking turns with the Python
-- API's and the worker's leases (its limit row locked, made first if it has none). A read
-- also sets last_read_at, which PGMQ's message record carries.
--
-- enable_sort is off in here so that the plan walks the ready index in order and stops at
-- qty. The generic plan does not know qty; when the statistics say the message partitions
-- are (nearly) empty, as they do after an ANALYZE of an idle table, it prices sorting every
-- visible message of the queue below that walk, and keeps that plan for the session: each
-- read would then sort the whole backlog. The same holds for pop.
CREATE FUNCTION @extschema@._pgq_lease(
    qrow @pgq@.pgq_queue, p_vt integer, p_qty integer, p_conditional jsonb
) RETURNS SETOF @extschema@.message_record
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_sort = off AS $$
#variable_conflict use_column
DECLARE
    p_queue text := qrow.name;
    limited boolean := qrow.rate_limit IS NOT NULL OR qrow.concurrency_limit IS NOT NULL;
    locked record;
BEGIN
    IF limited THEN
        @store:lock_limit@ INTO locked;
        IF NOT FOUND THEN
            @store:add_limit@;
            @store:lock_limit@ INTO locked;
            IF NOT FOUND THEN
                RETURN;  -- no limit any more: the next read takes the unlimited way
            END IF;
        END IF;
    END IF;
    IF NOT limited AND NOT qrow.fifo THEN
        RETURN QUERY @store:read@;
    ELSIF NOT limited THEN
        RETURN QUERY @store:read_fifo@;
    ELSIF NOT qrow.fifo THEN
        RETURN QUERY @store:read_limited@;
    ELSE
        RETURN QUERY @store:read_limited_fifo@;
    END IF;
END;
$$;

-- Lease the messages p_ids of queue qrow (a grouped read's choice) that are still visible,
-- as the Python API leases messages it selected, in the order of the choice.
CREATE FUNCTION @extschema@._pgq_lease_ids(
    qrow @pgq@.pgq_queue, p_vt integer, p_ids bigint[]
) RETURNS SETOF @extschema@.message_record
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY @store:lease_ids@;
END;
$$;

-- Take the messages p_ids out of queue qrow: deleted (archived as 'acked' when the queue
-- archives on ack), or archived with outcome 'archived' (``archives``), as the Python
-- API's delete and archive take them, counted as they count them; the archive keeps
-- last_read_at, which PGMQ's archive shows. Answers the ids taken, in order.
CREATE FUNCTION @extschema@._pgq_remove(qrow @pgq@.pgq_queue, p_ids bigint[], archives boolean)
RETURNS SETOF bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    p_queue text := qrow.name;
    acted record;
BEGIN
    IF archives THEN
        @store:archive@ INTO acted;
    ELSIF qrow.archive_on_ack THEN
        @store:delete_archiving@ INTO acted;
    ELSE
        @store:delete@ INTO acted;
    END IF;
    RETURN QUERY SELECT unnest(acted.msg_ids);
END;
$$;

-- Set the visibility of messages ``ids`` of queue q to ``visible_at`` (last_read_at kept).
CREATE FUNCTION @extschema@._pgq_set_vt(q @pgq@.pgq_queue, ids bigint[], visible_at timestamptz)
RETURNS SETOF @extschema@.message_record
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN QUERY
    WITH u AS (
        UPDATE @pgq@.pgq_message m SET vt = visible_at
        WHERE m.msg_id = ANY(ids) AND m.queue_id = (q).id
        RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.last_read_at, m.vt, m.message,
                  m.headers
    )
    SELECT u.msg_id, u.read_ct, u.enqueued_at, u.last_read_at, u.vt, u.message,
           @extschema@._pgq_headers(u.headers)
    FROM u ORDER BY u.msg_id;
END;
$$;

-- Make a queue with PGMQ's semantics: no expiry (the longest retention), no retry limit,
-- no dead-lettering, no byte budget, no delivery delay; ``durable`` false for unlogged. A
-- failed delivery through the Python API (a worker's nack) is seen again after 30 seconds,
-- PGMQ clients' usual visibility timeout, rather than at once in a tight loop.
-- A queue of that name (ignoring case) already there is left as it is, as PGMQ does.
CREATE FUNCTION @extschema@._pgq_create(queue_name text, durable boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- PGMQ's order: the characters (its table name is made first), then the length.
    IF queue_name ~ '\$|;|--|''' THEN
        RAISE EXCEPTION 'queue name contains invalid characters: $, ;, --, or \''';
    END IF;
    PERFORM @extschema@.validate_queue_name(queue_name);
    IF queue_name !~ '^[A-Za-z0-9_-]+$' THEN
        RAISE EXCEPTION 'queue name % is not allowed: use letters, digits, ''_'' and ''-'' only', quote_literal(queue_name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM @extschema@.acquire_queue_lock(lower(queue_name));
    IF EXISTS (SELECT 1 FROM @pgq@.pgq_queue q WHERE lower(q.name) = lower(_pgq_create.queue_name)) THEN
        RETURN;
    END IF;
    INSERT INTO @pgq@.pgq_queue (name, fifo, visibility_timeout, delivery_delay, retention,
        max_retries, retry_delay, backoff, backoff_cap, backoff_jitter, max_message_size,
        max_length, archive_on_ack, paused, rate_limit, concurrency_limit, callback,
        created_at, updated_at, dead_letter_queue_id, owner_id, content_based_deduplication,
        receive_wait_time, tags, durable)
    VALUES (queue_name, false, 30, 0, @forever@, 2147483647, 30, 'none', 30, false,
        2147483647, NULL, false, false, NULL, NULL, '', now(), now(), NULL, NULL, false, 0,
        '{}'::jsonb, _pgq_create.durable)
    -- A queue of this name, or of one differing only in case, made meanwhile (the
    -- Python API does not take PGMQ's lock) is left as it is too.
    ON CONFLICT DO NOTHING;
END;
$$;

-- The regular expression PGMQ compiles a topic pattern to (its topic_bindings column):
-- '*' one segment, '#' any run of characters, the rest literal.
CREATE FUNCTION @extschema@._pgq_topic_regex(pattern text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '^' || replace(replace(
        regexp_replace(pattern, '([.+?{}()|\[\]\\^$])', '\\\1', 'g'), '*', '[^.]+'),
        '#', '.*') || '$'
$$;

-- The same pattern as pgq_django's topic exchanges compile it (pgq_django.routing.topic_regex:
-- AMQP words over '.' || routing_key), kept in pgq_binding.key_pattern so pgq.publish to the
-- exchange routes by it too.
CREATE FUNCTION @extschema@._pgq_amqp_regex(pattern text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '^' || string_agg(CASE w.word
                                 WHEN '#' THEN '(\.[^.]*)*'
                                 WHEN '*' THEN '\.[^.]*'
                                 ELSE '\.' || regexp_replace(w.word, '([^[:alnum:]_])', '\\\1', 'g')
                             END, '' ORDER BY w.n) || '$'
    FROM regexp_split_to_table(pattern, '\.') WITH ORDINALITY AS w(word, n)
$$;

-- The exchange PGMQ's topic bindings live in (made on first bind).
CREATE FUNCTION @extschema@._pgq_topics() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    qrow bigint;
BEGIN
    SELECT id INTO qrow FROM @pgq@.pgq_exchange WHERE name = 'pgmq_topics';
    IF qrow IS NULL THEN
        INSERT INTO @pgq@.pgq_exchange (name, type, created_at)
        VALUES ('pgmq_topics', 'topic', now())
        ON CONFLICT (name) DO NOTHING RETURNING id INTO qrow;
        IF qrow IS NULL THEN
            SELECT id INTO qrow FROM @pgq@.pgq_exchange WHERE name = 'pgmq_topics';
        END IF;
    END IF;
    RETURN qrow;
END;
$$;

-- PGMQ's topic bindings, as pgq_django bindings of the 'pgmq_topics' exchange.
CREATE VIEW @extschema@.topic_bindings AS
SELECT b.routing_key::text AS pattern,
       q.name::text AS queue_name,
       b.created_at AS bound_at,
       @extschema@._pgq_topic_regex(b.routing_key) AS compiled_regex
FROM @pgq@.pgq_binding b
JOIN @pgq@.pgq_exchange e ON e.id = b.exchange_id AND e.name = 'pgmq_topics'
JOIN @pgq@.pgq_queue q ON q.id = b.queue_id;

-- The per-queue views PGMQ clients and scripts select from: q_<name> (live messages) and
-- a_<name> (the archive), kept in step with pgq_queue by the trigger below. The q_ view is
-- simple, so PostgreSQL updates pgq_message through it: UPDATE pgmq.q_x SET vt = ... works
-- and touches only that queue's messages; an INSERT through it fails (no queue id).
-- Each view's comment names the queue it belongs to ('pgq queue <id>'), and a view that
-- belongs to another queue is never replaced: PGMQ folds names to lower case, and a
-- second queue whose name differs only in case (which pgq_queue's unique index on
-- lower(name) refuses; a database that predates it could hold one) must not take over the
-- first's views.
CREATE FUNCTION @extschema@._pgq_make_views(queue_id bigint, queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    owner text;
BEGIN
    IF length(queue_name) > 61 THEN
        RETURN;  -- q_<name> would be cut to 63 bytes: no view for such a name
    END IF;
    FOREACH owner IN ARRAY ARRAY[
        obj_description(to_regclass(format('@extschema@.%I', lower('q_' || queue_name))),
                        'pg_class'),
        obj_description(to_regclass(format('@extschema@.%I', lower('a_' || queue_name))),
                        'pg_class')
    ] LOOP
        IF owner <> 'pgq queue ' || queue_id THEN
            RETURN;  -- another queue's views
        END IF;
    END LOOP;
    EXECUTE format(
        'CREATE OR REPLACE VIEW @extschema@.%I AS '
        'SELECT msg_id, read_ct, enqueued_at, last_read_at, vt, message, '
        '@extschema@._pgq_headers(headers) AS headers '
        'FROM @pgq@.pgq_message WHERE queue_id = %s',
        lower('q_' || queue_name), queue_id);
    EXECUTE format('COMMENT ON VIEW @extschema@.%I IS %L',
        lower('q_' || queue_name), 'pgq queue ' || queue_id);
    EXECUTE format(
        'CREATE OR REPLACE VIEW @extschema@.%I AS '
        'SELECT msg_id, read_ct, enqueued_at, last_read_at, archived_at, vt, message, '
        '@extschema@._pgq_headers(headers) AS headers '
        'FROM @pgq@.pgq_archived_message WHERE queue_id = %s',
        lower('a_' || queue_name), queue_id);
    EXECUTE format('COMMENT ON VIEW @extschema@.%I IS %L',
        lower('a_' || queue_name), 'pgq queue ' || queue_id);
END;
$$;

CREATE FUNCTION @extschema@._pgq_drop_views(queue_id bigint, queue_name text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    view_name text;
BEGIN
    FOREACH view_name IN ARRAY ARRAY[lower('q_' || queue_name), lower('a_' || queue_name)] LOOP
        -- Only the views of this queue: another queue of the same name ignoring case may
        -- own them.
        IF obj_description(to_regclass(format('@extschema@.%I', view_name)), 'pg_class')
           = 'pgq queue ' || queue_id THEN
            EXECUTE format('DROP VIEW @extschema@.%I', view_name);
        END IF;
    END LOOP;
END;
$$;

CREATE FUNCTION @extschema@._pgq_queue_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        PERFORM @extschema@._pgq_drop_views(OLD.id, OLD.name);
        IF TG_OP = 'DELETE' THEN
            DELETE FROM @extschema@.notify_insert_throttle WHERE queue_id = OLD.id;
        END IF;
        -- Views it gave up go to the queue PGMQ's calls would find by that name now.
        PERFORM @extschema@._pgq_make_views(q.id, q.name) FROM @pgq@.pgq_queue q
        WHERE lower(q.name) = lower(OLD.name) AND q.id <> OLD.id
        ORDER BY q.id LIMIT 1;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM @extschema@._pgq_make_views(NEW.id, NEW.name);
        UPDATE @extschema@.notify_insert_throttle SET queue_name = NEW.name
        WHERE queue_id = NEW.id AND queue_name <> NEW.name;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER pgq_pgmq_views AFTER INSERT OR DELETE ON @pgq@.pgq_queue
    FOR EACH ROW EXECUTE FUNCTION @extschema@._pgq_queue_changed();
-- Django's save() writes every column, name included: only a new name remakes the views.
CREATE TRIGGER pgq_pgmq_views_renamed AFTER UPDATE OF name ON @pgq@.pgq_queue
    FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name)
    EXECUTE FUNCTION @extschema@._pgq_queue_changed();

-- The wake-up of PGMQ listeners ('pgmq.q_<name>.INSERT', PGMQ's channel), throttled per
-- queue as PGMQ throttles it. A row trigger on pgq_message, present only while some queue
-- has notify_insert enabled, so it wakes them for sends through either API.
CREATE FUNCTION @extschema@._pgq_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    channel_queue text;
BEGIN
    UPDATE @extschema@.notify_insert_throttle t
    SET last_notified_at = clock_timestamp()
    WHERE t.queue_id = NEW.queue_id
      AND (t.throttle_interval_ms = 0
           OR clock_timestamp() - t.last_notified_at
              >= t.throttle_interval_ms * INTERVAL '1 millisecond')
    RETURNING t.queue_name INTO channel_queue;
    IF channel_queue IS NOT NULL THEN
        PERFORM pg_notify('pgmq.' || lower('q_' || channel_queue) || '.INSERT', NULL);
    END IF;
    RETURN NULL;
END;
$$;
