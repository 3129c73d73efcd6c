"""JSON into the client's models, planned once per class (the hot half of the codec).

``kubernetes_asyncio``'s ``ApiClient`` decodes a model by reading each
field's type out of a type string with regular expressions, collecting
keyword arguments, running every property setter and parsing times with
``dateutil``; under a churn of pods that was the largest share of the
kubelet's CPU (issue 37). This module builds the very same model objects
(``V1Pod`` and all it contains, equal field for field, of the same classes)
with the per-class work done once:

- for each model class, a plan: its JSON keys, the attribute each one fills,
  and the decoder of that attribute's type, made on first use;
- an instance is filled in directly, with the attributes the generated
  constructor would leave at ``None`` also ``None``;
- primitives already of their type are taken as they are, others converted
  as the generated code converts them (``str(5)`` is ``"5"``);
- times in the API server's RFC 3339 forms are read by
  ``datetime.fromisoformat`` (UTC, the same instant as ``dateutil`` gives);
  any other spelling goes through the generated parser, as before.

What the generated setters check is kept by not taking the fast path: an
object lacking a required field, and every object of a class whose setters
check more than presence (the base64 patterns of a few certificate types),
is decoded by the generated code, which raises the same ``ValueError``.
"""

from __future__ import annotations

import datetime
import inspect
import re
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.client import ApiClient, models
from kubernetes_asyncio.client.configuration import Configuration

Decoder = Callable[[Any], Any]

# The generated ApiClient holds the reference decoder, but its constructor opens
# an HTTP connection pool that needs a running event loop; only the codec half is
# needed here, so the instance is made without __init__.
_generated: Any = ApiClient.__new__(ApiClient)

_PRIMITIVES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}
_LIST = re.compile(r"list\[(.*)\]\Z")
_DICT = re.compile(r"dict\(([^,]*), (.*)\)\Z")
# The API server writes metav1.Time as ...T09:55:30Z and MicroTime with up to six digits.
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-]\d\d:\d\d)\Z")
_NOT_NONE = "must not be `None`"

_decoders: dict[str, Decoder] = {}


def generated_decode(data: Any, type_name: str) -> Any:
    """The generated client's own decoding of ``data`` as ``type_name`` (the reference)."""
    return _generated._ApiClient__deserialize(data, type_name)


def decode(data: Any, type_name: str) -> Any:
    """``data`` (parsed JSON) as the model or type ``type_name`` names (``"V1Pod"``,
    ``"list[V1Container]"``, ``"datetime"``...), equal to what the generated client makes."""
    if data is None:
        return None
    return decoder_for(type_name)(data)


def decoder_for(type_name: str) -> Decoder:
    """The decoder of one type string, made once and kept."""
    decoder = _decoders.get(type_name)
    if decoder is None:
        decoder = _new_decoder(type_name)
        _decoders[type_name] = decoder
    return decoder


def _new_decoder(type_name: str) -> Decoder:
    if (match := _LIST.match(type_name)) is not None:
        return _list_decoder(match.group(1))
    if (match := _DICT.match(type_name)) is not None:
        return _dict_decoder(match.group(2))
    if type_name in _PRIMITIVES:
        return _primitive_decoder(_PRIMITIVES[type_name])
    if type_name == "object":
        return _identity
    if type_name == "datetime":
        return _datetime
    klass = getattr(models, type_name, None)
    if isinstance(klass, type) and hasattr(klass, "openapi_types"):
        return _ModelDecoder(klass)
    # dates, files and anything unforeseen: the generated code, unchanged.
    return lambda data: generated_decode(data, type_name)


def _identity(data: Any) -> Any:
    return data


def _list_decoder(item_type: str) -> Decoder:
    item = decoder_for(item_type)

    def decode_list(data: Any) -> Any:
        return [None if value is None else item(value) for value in data]
    return decode_list


def _dict_decoder(value_type: str) -> Decoder:
    value_decoder = decoder_for(value_type)
    if value_type == "str":
        def decode_str_map(data: Any) -> Any:
            return {key: value if type(value) is str or value is None else value_decoder(value)
                    for key, value in data.items()}
        return decode_str_map

    def decode_map(data: Any) -> Any:
        return {key: None if value is None else value_decoder(value)
                for key, value in data.items()}
    return decode_map


def _primitive_decoder(klass: type) -> Decoder:
    def decode_primitive(data: Any) -> Any:
        if type(data) is klass:
            return data
        # What the generated code does with a value of another type.
        try:
            return klass(data)
        except UnicodeEncodeError:
            return str(data)
        except TypeError:
            return data
    return decode_primitive


def _datetime(data: Any) -> Any:
    if isinstance(data, str) and _RFC3339.match(data):
        return datetime.datetime.fromisoformat(data)
    return generated_decode(data, "datetime")


def _storage(klass: type, attr: str) -> str:
    """Where a generated property keeps its value: ``self._name``, and for the fields
    renamed off keywords (``_exec``), ``self.__exec`` under Python's name mangling."""
    private = f"_{attr}"
    if private.startswith("__") and not private.endswith("__"):
        return f"_{klass.__name__.lstrip('_')}{private}"
    return private


class _ModelDecoder:
    """One model class: its plan, made on first use (types may contain themselves)."""

    def __init__(self, klass: type) -> None:
        self.klass = klass
        self.name = klass.__name__
        self._fields: list[tuple[str, str, Decoder]] | None = None
        self._required: tuple[str, ...] = ()
        self._blank: dict[str, Any] = {}
        self._fast = True

    def _plan(self) -> list[tuple[str, str, Decoder]]:
        klass: Any = self.klass
        types: dict[str, str] = klass.openapi_types or {}
        self._fast = bool(types) and not getattr(klass, "discriminator_value_class_map", None)
        required: list[str] = []
        if self._fast:
            try:
                source = inspect.getsource(klass)
            except (OSError, TypeError):
                source = ""
            # Setters that check anything but presence: left to the generated code.
            if not source or source.count("raise ValueError") != source.count(_NOT_NONE):
                self._fast = False
            for attr in types:
                setter = getattr(klass, attr, None)
                fset = getattr(setter, "fset", None)
                if fset is not None and _NOT_NONE in inspect.getsource(fset):
                    required.append(klass.attribute_map[attr])
        self._required = tuple(required)
        self._blank = {_storage(klass, attr): None for attr in types}
        self._blank["discriminator"] = None
        fields = [(klass.attribute_map[attr], _storage(klass, attr), decoder_for(kind))
                  for attr, kind in types.items()]
        self._fields = fields
        return fields

    def __call__(self, data: Any) -> Any:
        fields = self._fields if self._fields is not None else self._plan()
        if not self._fast or type(data) is not dict:
            if not self.klass.openapi_types:  # type: ignore[attr-defined]
                return data  # what the generated code does with a model without fields
            return generated_decode(data, self.name)
        for key in self._required:
            if data.get(key) is None:
                return generated_decode(data, self.name)  # raises its ValueError
        values = dict(self._blank)
        values["local_vars_configuration"] = Configuration.get_default()
        for key, attribute, decoder in fields:
            value = data.get(key)
            if value is not None:
                values[attribute] = decoder(value)
        instance: Any = object.__new__(self.klass)
        instance.__dict__.update(values)
        return instance


__all__ = ["decode", "decoder_for", "generated_decode"]
