"""SageMaker's CreateTrainingJob request, checked the way the service checks it.

botocore's own client-side validator checks only required members, types and minimums. The
service also rejects maximums, enums, patterns and members it does not know. `validate` walks the
API model's shapes and checks all of them, so a request it passes is not rejected for its shape.
"""

import functools

import botocore.loaders
import botocore.model
import regex

SERVICE = botocore.model.ServiceModel(
    botocore.loaders.Loader().load_service_model("sagemaker", "service-2"),
    service_name="sagemaker",
)
REQUEST = SERVICE.operation_model("CreateTrainingJob").input_shape


def shape(name):
    return SERVICE.shape_for(name)


def enum(name):
    return shape(name).metadata["enum"]


# Java's meaning where it differs from Python's: \d \w \s and \p{Alnum} are ASCII-only, and `.`
# stops at every line terminator, not only at \n. Each becomes an explicit class; regex's V1 mode
# allows a class nested in another one, so the same text is right inside [...] and outside it.
# (V1 also reads `&&` in a class as intersection, as Java does.)
_JAVA = {
    r"\d": "[0-9]",
    r"\D": "[^0-9]",
    r"\w": "[a-zA-Z0-9_]",
    r"\W": "[^a-zA-Z0-9_]",
    r"\s": r"[ \t\n\x0B\f\r]",
    r"\S": r"[^ \t\n\x0B\f\r]",
    r"\p{Alnum}": "[a-zA-Z0-9]",
}
_DOT = r"[^\n\r\u0085\u2028\u2029]"
_TOKEN = regex.compile(r"\\p\{\w+\}|\\.|.", regex.S)


@functools.cache
def pattern(java):
    """A model pattern (a Java regex) compiled for `regex`; use it with fullmatch, since the
    service matches the whole value and the model's patterns carry no anchors."""
    out, depth = [], 0
    for token in _TOKEN.findall(java):
        if token == "[":
            depth += 1
        elif token == "]" and depth:
            depth -= 1
        elif token == "." and not depth:
            token = _DOT
        out.append(_JAVA.get(token, token))
    return regex.compile("".join(out), regex.V1)


_TYPES = {
    "structure": dict,
    "map": dict,
    "list": list,
    "string": str,
    "boolean": bool,
    "integer": int,
    "long": int,
    "double": (int, float),
    "float": (int, float),
}
# Beyond these a number does not parse as the service's Java int or long.
_INT_LIMIT = {"integer": 2**31, "long": 2**63}


def _show(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate(shape_or_name, value, path=""):
    """Every way `value` breaks the shape, as `path: problem` strings; [] when it is valid."""
    s = shape(shape_or_name) if isinstance(shape_or_name, str) else shape_or_name
    kind = s.type_name
    where = path or "<request>"
    expected = _TYPES.get(kind)
    if expected is None:
        return [f"{where}: no check for {kind} values"]  # timestamps and blobs: none rendered
    # bool is an int in Python, never in the service.
    if not isinstance(value, expected) or (isinstance(value, bool) and kind != "boolean"):
        return [f"{where}: expected {kind}, got {type(value).__name__}"]
    if kind == "structure":
        return _structure(s, value, path)
    if kind == "boolean":
        return []

    errors = []
    meta = s.metadata
    if kind in ("string", "list", "map"):
        size, what = len(value), "size" if kind == "map" else "length"
    else:
        size, what = value, "value"
    if kind in _INT_LIMIT and not -_INT_LIMIT[kind] <= value < _INT_LIMIT[kind]:
        errors.append(f"{where}: {value} out of {kind} range")
    if "min" in meta and size < meta["min"]:
        errors.append(f"{where}: {what} {size} below minimum {meta['min']}")
    if "max" in meta and size > meta["max"]:
        errors.append(f"{where}: {what} {size} above maximum {meta['max']}")
    if "enum" in meta and value not in meta["enum"]:
        errors.append(f"{where}: {_show(value)} not in enum")
    if "pattern" in meta and not pattern(meta["pattern"]).fullmatch(value):
        errors.append(f"{where}: {_show(value)} does not match {meta['pattern']}")

    if kind == "list":
        for i, item in enumerate(value):
            errors += validate(s.member, item, f"{where}[{i}]")
    elif kind == "map":
        for key, item in value.items():
            errors += validate(s.key, key, f"{where} key")
            errors += validate(s.value, item, f"{where}[{key!r}]")
    return errors


def _structure(s, value, path):
    def at(name):
        return f"{path}.{name}" if path else name

    errors = [f"{at(n)}: required member missing" for n in s.required_members if n not in value]
    for name, item in value.items():
        if name in s.members:
            errors += validate(s.members[name], item, at(name))
        else:
            errors.append(f"{at(name)}: unknown member")
    if s.is_tagged_union and len(value) != 1:
        errors.append(f"{path or '<request>'}: a union sets exactly one member, not {len(value)}")
    return errors


def hetero_errors(request):
    """The heterogeneous-cluster rules of CreateTrainingJob that the shapes cannot express."""
    errors = []
    resources = request.get("ResourceConfig", {})
    groups = resources.get("InstanceGroups")
    if groups is not None:
        # A job is sized either by InstanceType/InstanceCount or by InstanceGroups, never both.
        errors += [f"ResourceConfig.{key}: set beside InstanceGroups"
                   for key in ("InstanceType", "InstanceCount") if key in resources]
        # Warm pools keep one cluster of one type alive; several groups cannot use them.
        if len(groups) > 1 and "KeepAlivePeriodInSeconds" in resources:
            errors.append("ResourceConfig.KeepAlivePeriodInSeconds: set with several groups")
    names = [g.get("InstanceGroupName") for g in groups or []]
    errors += [f"ResourceConfig.InstanceGroups: {n!r} named twice"
               for n in sorted(set(n for n in names if names.count(n) > 1))]

    # Once one channel says which groups read it, every channel must, and only real groups.
    channels = request.get("InputDataConfig", [])
    targets = [c.get("DataSource", {}).get("S3DataSource", {}).get("InstanceGroupNames")
               for c in channels]
    if any(t is not None for t in targets):
        for i, target in enumerate(targets):
            where = f"InputDataConfig[{i}].DataSource.S3DataSource.InstanceGroupNames"
            if target is None:
                errors.append(f"{where}: missing while other channels set it")
            errors += [f"{where}: {n!r} is not an instance group"
                       for n in target or [] if n not in names]
    return errors
