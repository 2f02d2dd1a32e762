"""Checks a CreateTrainingJob request against SageMaker's API model, as the service would.

botocore's own client validates only required members, minimums and types; the service also
enforces maximums, patterns and enums. This walks the model's shapes and checks all of them,
so a request that passes here is not rejected for its shape.
"""

import botocore.loaders
import botocore.model
import regex

_MODEL = botocore.loaders.Loader().load_service_model("sagemaker", "service-2")
SERVICE = botocore.model.ServiceModel(_MODEL, service_name="sagemaker")
SHAPES = _MODEL["shapes"]


def input_shape(operation="CreateTrainingJob"):
    return SERVICE.operation_model(operation).input_shape


def enum(shape_name):
    return SHAPES[shape_name]["enum"]


def _pattern(pattern):
    # The model's patterns are Java regexes matched against the whole value.
    return regex.compile(pattern, regex.V1)


def validate(value, shape_name="CreateTrainingJobRequest", path=""):
    """Every way `value` breaks shape `shape_name`, as `path: problem` strings."""
    shape = SHAPES[shape_name]
    kind = shape["type"]
    where = path or "<request>"
    errors = []

    expected = {
        "structure": dict,
        "map": dict,
        "list": list,
        "string": str,
        "boolean": bool,
        "integer": int,
        "long": int,
    }.get(kind)
    if expected is None:
        return errors  # blobs, timestamps and doubles never appear in a rendered request
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        return [f"{where}: expected {kind}, got {type(value).__name__}"]

    if kind == "structure":
        members = shape["members"]
        for name in shape.get("required", []):
            if name not in value:
                errors.append(f"{where}: missing required member {name}")
        for name, member in value.items():
            if name not in members:
                errors.append(f"{where}: unknown member {name}")
                continue
            child = f"{path}.{name}" if path else name
            errors += validate(member, members[name]["shape"], child)
        return errors

    size = None
    if kind in ("list", "map"):
        size = len(value)
    elif kind == "string":
        size = len(value)
    if size is not None:
        if "min" in shape and size < shape["min"]:
            errors.append(f"{where}: length {size} below minimum {shape['min']}")
        if "max" in shape and size > shape["max"]:
            errors.append(f"{where}: length {size} above maximum {shape['max']}")
    if kind in ("integer", "long"):
        if "min" in shape and value < shape["min"]:
            errors.append(f"{where}: {value} below minimum {shape['min']}")
        if "max" in shape and value > shape["max"]:
            errors.append(f"{where}: {value} above maximum {shape['max']}")
    if kind == "string":
        if "enum" in shape and value not in shape["enum"]:
            errors.append(f"{where}: {value!r} not in enum {shape_name}")
        if "pattern" in shape and not _pattern(shape["pattern"]).fullmatch(value):
            errors.append(f"{where}: {value!r} does not match {shape['pattern']}")
    if kind == "list":
        for i, item in enumerate(value):
            errors += validate(item, shape["member"]["shape"], f"{where}[{i}]")
    if kind == "map":
        for key, item in value.items():
            errors += validate(key, shape["key"]["shape"], f"{where} key {key!r}")
            errors += validate(item, shape["value"]["shape"], f"{where}[{key!r}]")
    return errors


def hetero_errors(request):
    """The heterogeneous-cluster rules the shapes alone do not express."""
    errors = []
    resources = request.get("ResourceConfig", {})
    groups = resources.get("InstanceGroups")
    if groups:
        for key in ("InstanceType", "InstanceCount"):
            if key in resources:
                errors.append(f"ResourceConfig.{key} set beside InstanceGroups")
        if len(groups) > 1 and "KeepAlivePeriodInSeconds" in resources:
            errors.append("warm pool (KeepAlivePeriodInSeconds) with several instance groups")
    names = {g["InstanceGroupName"] for g in groups or []}
    sources = [c["DataSource"]["S3DataSource"] for c in request.get("InputDataConfig", [])]
    named = [s for s in sources if "InstanceGroupNames" in s]
    if named and len(named) != len(sources):
        errors.append("some channels name instance groups and others do not")
    for source in named:
        for name in source["InstanceGroupNames"]:
            if name not in names:
                errors.append(f"channel names unknown instance group {name!r}")
    return errors
