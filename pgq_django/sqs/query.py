"""SQS's Query protocol: form-encoded requests in, XML answers and errors out.

The AWS SDKs released before SQS moved to AWS JSON 1.0 (late 2023) — boto3/botocore before
1.31.x's successors, Java v1, Go v1, .NET, PHP and Ruby of that time — POST
``Action=SendMessage&Version=2012-11-05&QueueUrl=…`` with the request's structures
flattened into numbered names (``Attribute.1.Name``, ``MessageAttribute.1.Value.DataType``,
``SendMessageBatchRequestEntry.2.MessageBody``) and read XML back. This module is the whole
translation, and nothing more: :func:`read` turns such a form into the action's name and
the very parameters an AWS JSON 1.0 request of that action carries, so every action runs
the same code whichever protocol brought it; :func:`render` and :func:`render_error` write
the action's answer (the same dict the JSON protocol encodes) and SQS's errors as the XML
those SDKs parse.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from .errors import SqsError, invalid
from .message_attributes import deliverable, forbidden_character

CONTENT_TYPE = "application/x-www-form-urlencoded"
XML_CONTENT_TYPE = "text/xml"
NAMESPACE = "http://queue.amazonaws.com/doc/2012-11-05/"

# Flattened lists of strings: Query name -> JSON name.
_LISTS = {
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "TagKey": "TagKeys",
}
# Flattened maps: Query name -> (JSON name, key element, value element).
_MAPS = {
    "Attribute": ("Attributes", "Name", "Value"),
    "Tag": ("Tags", "Key", "Value"),
    "MessageAttribute": ("MessageAttributes", "Name", "Value"),
    "MessageSystemAttribute": ("MessageSystemAttributes", "Name", "Value"),
}
# Whole-number parameters (the form carries text; the JSON protocol numbers).
_INTEGERS = frozenset(
    {
        "DelaySeconds",
        "MaxNumberOfMessages",
        "VisibilityTimeout",
        "WaitTimeSeconds",
        "MaxResults",
        "MaxNumberOfMessagesPerSecond",
    }
)
# An empty list or map is sent as its member's own name with no value (``Entries=``).
_EMPTY: dict[str, Any] = {
    "Entries": list,
    **dict.fromkeys(_LISTS.values(), list),
    **dict.fromkeys([target for target, _key, _value in _MAPS.values()], dict),
    "tags": dict,
}
_BATCHES = frozenset({"SendMessageBatch", "DeleteMessageBatch", "ChangeMessageVisibilityBatch"})
# The most dot-separated parts a parameter's name has: SQS's deepest is seven
# (``SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringListValue.1``). A deeper
# name is no request of SQS's, and would nest the parameters as deep as it asks.
_MAX_PARTS = 8
# The longest list index: SQS's lists hold at most a few dozen members. A longer run of
# digits is no index (and past 4,300 digits Python refuses to read it as a number).
_MAX_INDEX_DIGITS = 6

Tree = dict[str, Any]


def _malformed(name: str) -> SqsError:
    return invalid(f"The request has a malformed parameter {name[:100]}.")


def _form(body: bytes) -> list[tuple[str, str]]:
    try:
        text = body.decode("utf-8")
        return parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text))
    except (UnicodeDecodeError, ValueError):
        raise invalid("The request body is not a well-formed form (UTF-8, URL-encoded).") from None


def action_of(body: bytes) -> str:
    """The ``Action`` a Query request names ("" when it names none)."""
    for name, value in _form(body):
        if name == "Action":
            return value
    return ""


def _allowed(name: str, text: str) -> None:
    """Refuse a character SQS does not allow in a parameter's name or in the Action (echoed
    in an answer, it would make XML that does not parse); values are the actions' to check,
    in SQS's own words."""
    bad = forbidden_character(text)
    if bad is not None:
        raise invalid(
            f"Value for parameter {deliverable(name[:100])} is invalid. Reason: "
            f"U+{ord(bad):04X} is not an allowed character."
        )


def read(body: bytes) -> tuple[str, dict[str, Any]]:
    """The action of a Query request and its parameters, shaped as the JSON protocol's."""
    tree: Tree = {}
    for name, value in _form(body):
        _allowed(name, name)
        if name == "Action":
            _allowed(name, value)
        node = tree
        parts = name.split(".")
        if len(parts) > _MAX_PARTS:
            raise _malformed(name)
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise _malformed(name)
            node = child
        if parts[-1] in node:  # a name given twice, or both a value and a structure
            raise _malformed(name)
        node[parts[-1]] = value
    action = tree.pop("Action", "")
    tree.pop("Version", None)
    if not isinstance(action, str):
        raise _malformed("Action")
    return action, _structure(tree, action)


def _indexed(node: Any, name: str) -> list[Any]:
    """The members of a flattened list in index order (``.1``, ``.2``, …); an empty list
    is sent as the bare name with no value."""
    if node == "":
        return []
    if not isinstance(node, dict) or not all(
        k.isascii() and k.isdigit() and len(k) <= _MAX_INDEX_DIGITS for k in node
    ):
        raise _malformed(name)
    return [node[k] for k in sorted(node, key=int)]


def _structure(tree: Tree, action: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    entry_name = f"{action}RequestEntry" if action in _BATCHES else None
    for name, node in tree.items():
        if name == entry_name:
            entries = _indexed(node, name)
            if not all(isinstance(e, dict) for e in entries):
                raise _malformed(name)
            params["Entries"] = [_structure(e, action) for e in entries]
        elif name in _LISTS:
            items = _indexed(node, name)
            if not all(isinstance(item, str) for item in items):
                raise _malformed(name)
            params[_LISTS[name]] = items
        elif name in _MAPS:
            key_name, value_name = _MAPS[name][1:]
            found: dict[str, Any] = {}
            for pair in _indexed(node, name):
                if not isinstance(pair, dict) or not isinstance(pair.get(key_name), str):
                    raise _malformed(name)
                found[pair[key_name]] = pair.get(value_name)
            # CreateQueue's tags are "tags" in its JSON shape; TagQueue's are "Tags".
            target = "tags" if name == "Tag" and action == "CreateQueue" else _MAPS[name][0]
            params[target] = found
        elif name in _EMPTY and node == "":
            params[name] = _EMPTY[name]()
        elif isinstance(node, str):
            number = node.removeprefix("-")
            is_integer = number.isascii() and number.isdigit() and len(number) <= 18
            params[name] = int(node) if name in _INTEGERS and is_integer else node
        else:
            params[name] = node  # a structure nothing reads (the action refuses what it needs)
    return params


# -- answers -------------------------------------------------------------------------------


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    # XML readers turn a bare CR into LF: SQS writes it as a reference, and so does this.
    # A character XML cannot carry at all never gets this far in a message (the actions
    # deliver U+FFFD for it); anywhere else, such as a stored tag, it becomes U+FFFD too, so
    # that no answer fails to parse.
    return escape(deliverable(str(value))).replace("\r", "&#xD;")


def _element(name: str, value: Any, action: str) -> str:
    """One member of an answer as Query XML (flattened lists and maps, as SQS writes them)."""
    if name in ("Attributes", "Tags", "MessageAttributes"):
        entry, key_name = {
            "Attributes": ("Attribute", "Name"),
            "Tags": ("Tag", "Key"),
            "MessageAttributes": ("MessageAttribute", "Name"),
        }[name]
        return "".join(
            f"<{entry}><{key_name}>{_text(key)}</{key_name}>"
            f"{_element('Value', item, action)}</{entry}>"
            for key, item in value.items()
        )
    if isinstance(value, list):
        entry = {
            "Messages": "Message",
            "QueueUrls": "QueueUrl",
            "queueUrls": "QueueUrl",
            "Successful": f"{action}ResultEntry",
            "Failed": "BatchResultErrorEntry",
        }.get(name, name)
        return "".join(_element(entry, item, action) for item in value)
    if isinstance(value, dict):
        inner = "".join(_element(key, item, action) for key, item in value.items())
        return f"<{name}>{inner}</{name}>"
    return f"<{name}>{_text(value)}</{name}>"


def render(action: str, result: dict[str, Any], request_id: str) -> bytes:
    """An action's answer (the dict the JSON protocol encodes) as SQS's Query XML."""
    inner = "".join(_element(name, value, action) for name, value in result.items())
    return (
        f'<?xml version="1.0"?><{action}Response xmlns="{NAMESPACE}">'
        f"<{action}Result>{inner}</{action}Result>"
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    ).encode()


def render_error(error: SqsError, request_id: str) -> bytes:
    """SQS's XML ErrorResponse: the query code, its message and who was at fault."""
    fault = "Sender" if error.sender_fault else "Receiver"
    return (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{NAMESPACE}"><Error>'
        f"<Type>{fault}</Type><Code>{_text(error.code)}</Code>"
        f"<Message>{_text(error.message)}</Message><Detail/></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()
