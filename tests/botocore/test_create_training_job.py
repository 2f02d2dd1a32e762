"""Every CreateTrainingJob request hetgen renders is one the SageMaker service accepts.

The requests are checked against botocore's copy of the SageMaker API model (2017-07-24), both by
botocore's own client-side validator and by `sagemaker_model.validate`, which also checks what
only the service checks. The tests below the rendered ones prove that the checker can fail.
"""

import copy
import json
import os
import pathlib
import subprocess
import tomllib

import botocore.validate
import pytest

import sagemaker_model as model

REPO = pathlib.Path(os.environ.get("HETGEN_REPO") or pathlib.Path(__file__).resolve().parents[2])
# Single-file examples and the project examples (a folder with hetgen.toml and its script).
EXAMPLES = sorted([*(REPO / "examples").glob("*.toml"), *(REPO / "examples").glob("*/hetgen.toml")])
CATALOG = REPO / "generator/spec/data/instances.toml"


def botocore_errors(request):
    report = botocore.validate.ParamValidator().validate(request, model.REQUEST)
    return report.generate_report() if report.has_errors() else ""


# With no example the parameter list holds one None, so the test fails instead of being skipped.
@pytest.mark.parametrize("example", EXAMPLES or [None], ids=lambda p: p.stem if p else "none")
def test_rendered_request(example, tmp_path, hetgen_bin):
    assert example, f"no examples/*.toml in {REPO}"
    run = subprocess.run([hetgen_bin, "render", str(example), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"hetgen render failed:\n{run.stderr}"
    rendered = list(tmp_path.glob("*/create-training-job.json"))
    spec = tomllib.loads(example.read_text())
    if "sagemaker" not in spec:
        assert rendered == [], "a spec without [sagemaker] (a local-only job) renders no request"
        return
    assert len(rendered) == 1, f"expected one create-training-job.json, found {rendered}"

    request = json.loads(rendered[0].read_text())
    assert model.validate(model.REQUEST, request) == []
    assert botocore_errors(request) == ""
    assert model.hetero_errors(request) == []
    # Several groups in the spec become InstanceGroups, in order and under their own names.
    groups = spec.get("instance_group", [])
    if len(groups) > 1:
        rendered_groups = request["ResourceConfig"]["InstanceGroups"]
        assert [g["InstanceGroupName"] for g in rendered_groups] == [g["name"] for g in groups]


def test_catalog_types_are_training_instance_types():
    assert CATALOG.exists(), f"{CATALOG} is missing"
    types = [entry["type"] for entry in tomllib.loads(CATALOG.read_text())["instance"]]
    assert types, f"{CATALOG} lists no [[instance]]"
    assert sorted(set(types) - set(model.enum("TrainingInstanceType"))) == []


# Every accelerated (GPU and Trainium) member of the enum is in the catalog.
def test_catalog_covers_every_accelerated_training_type():
    types = {entry["type"] for entry in tomllib.loads(CATALOG.read_text())["instance"]}
    family = lambda t: t.removeprefix("ml.").rsplit(".", 1)[0]  # noqa: E731
    accelerated = [t for t in model.enum("TrainingInstanceType")
                   if family(t)[0] in "gp" or family(t).startswith("trn")]
    assert len(accelerated) > 50  # the walk found the GPU and Trainium types, not a stub
    assert sorted(t for t in accelerated if t not in types) == []


def test_every_pattern_compiles():
    seen, todo = set(), [model.REQUEST]
    while todo:
        s = todo.pop()
        if s.name in seen:
            continue
        seen.add(s.name)
        if "pattern" in s.metadata:
            model.pattern(s.metadata["pattern"])
        todo += list(getattr(s, "members", {}).values())
        todo += [getattr(s, a) for a in ("member", "key", "value") if hasattr(s, a)]
    assert len(seen) > 100  # the walk reached the whole request, not just its top


MINIMAL = {
    "TrainingJobName": "minimal-job",
    "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
    "AlgorithmSpecification": {"TrainingImage": "img:latest", "TrainingInputMode": "File"},
    "OutputDataConfig": {"S3OutputPath": "s3://b/o/"},
    "ResourceConfig": {
        "InstanceGroups": [
            {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "InstanceGroupName": "a"},
        ],
        "VolumeSizeInGB": 30,
    },
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
}


def mutated(change):
    request = copy.deepcopy(MINIMAL)
    change(request)
    return request


def group(request):
    return request["ResourceConfig"]["InstanceGroups"][0]


def test_minimal_request_is_valid():
    assert model.validate(model.REQUEST, MINIMAL) == []
    assert botocore_errors(MINIMAL) == ""
    assert model.hetero_errors(MINIMAL) == []


# Each mutation breaks one rule; the checker must report it at the path of what was changed.
MUTATIONS = {
    "job-name-64-chars": ("TrainingJobName", lambda r: r.update(TrainingJobName="a" * 64)),
    "job-name-underscore": ("TrainingJobName", lambda r: r.update(TrainingJobName="bad_name")),
    "role-arn-short-account": ("RoleArn", lambda r: r.update(RoleArn="arn:aws:iam::1234:role/x")),
    # Java's \d is ASCII: Arabic-Indic digits are no account number.
    "role-arn-unicode-digits": ("RoleArn", lambda r: r.update(
        RoleArn="arn:aws:iam::" + "\u0661" * 12 + ":role/x")),
    "unknown-instance-type": ("ResourceConfig.InstanceGroups[0].InstanceType",
                              lambda r: group(r).update(InstanceType="ml.x")),
    "six-instance-groups": ("ResourceConfig.InstanceGroups", lambda r: r["ResourceConfig"].update(
        InstanceGroups=[dict(group(r), InstanceGroupName=f"g{i}") for i in range(6)])),
    "tag-key-hash": ("Tags[0].Key", lambda r: r.update(Tags=[{"Key": "bad#key", "Value": "v"}])),
    "101-hyperparameters": ("HyperParameters", lambda r: r.update(
        HyperParameters={f"k{i}": "v" for i in range(101)})),
    "hyperparameter-2501-chars": ("HyperParameters['k']",
                                  lambda r: r.update(HyperParameters={"k": "v" * 2501})),
    # Java's `.` stops at \r too, not only at \n.
    "hyperparameter-carriage-return": ("HyperParameters['k']",
                                       lambda r: r.update(HyperParameters={"k": "a\rb"})),
    "environment-key-digit-first": ("Environment key",
                                    lambda r: r.update(Environment={"1BAD": "x"})),
    "unknown-top-level-member": ("NotAMember", lambda r: r.update(NotAMember=1)),
    "instance-count-string": ("ResourceConfig.InstanceGroups[0].InstanceCount",
                              lambda r: group(r).update(InstanceCount="1")),
    "instance-count-bool": ("ResourceConfig.InstanceGroups[0].InstanceCount",
                            lambda r: group(r).update(InstanceCount=True)),
    "missing-role-arn": ("RoleArn", lambda r: r.pop("RoleArn")),
    "runtime-zero": ("StoppingCondition.MaxRuntimeInSeconds",
                     lambda r: r["StoppingCondition"].update(MaxRuntimeInSeconds=0)),
    "runtime-beyond-int32": ("StoppingCondition.MaxRuntimeInSeconds",
                             lambda r: r["StoppingCondition"].update(MaxRuntimeInSeconds=2**31)),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_validator_catches(name):
    path, change = MUTATIONS[name]
    errors = model.validate(model.REQUEST, mutated(change))
    assert any(e.startswith(f"{path}: ") for e in errors), errors


def test_error_names_path_and_problem():
    errors = model.validate(model.REQUEST, mutated(MUTATIONS["unknown-instance-type"][1]))
    assert errors == ["ResourceConfig.InstanceGroups[0].InstanceType: 'ml.x' not in enum"]


@pytest.mark.parametrize("shape, value, valid", [
    ("TagKey", "caf\u00e9 \u0663:x", True),  # \p{L}, \p{Z} and \p{N} are Unicode classes
    ("TagKey", "a#b", False),
    ("ArnOrName", "my-algorithm", True),
    ("ArnOrName", "my-algorithm-", False),  # (?<!-): no trailing hyphen
    ("TrainingRepositoryCredentialsProviderArn",
     "arn:aws:lambda:us-east-1:123456789012:function:f", True),
    ("TrainingRepositoryCredentialsProviderArn",  # Java's \p{Alnum} is ASCII
     "arn:aws:lambda:us-\u00e9ast-1:123456789012:function:f", False),
    ("TrainingEnvironmentValue", "line one\nline two", True),  # [\S\s]* takes anything
    ("S3Uri", "s3://bucket/key", True),
    ("S3Uri", "gs://bucket/key", False),  # matched whole, not found inside
])
def test_java_pattern_semantics(shape, value, valid):
    assert (model.validate(shape, value) == []) == valid


HETERO_BREAKS = {
    "instance-type-beside-groups": lambda r: r["ResourceConfig"].update(InstanceType="ml.c5.xlarge"),
    "instance-count-beside-groups": lambda r: r["ResourceConfig"].update(InstanceCount=1),
    "warm-pool-with-two-groups": lambda r: r["ResourceConfig"].update(
        KeepAlivePeriodInSeconds=60,
        InstanceGroups=[group(r), dict(group(r), InstanceGroupName="b")]),
    "group-named-twice": lambda r: r["ResourceConfig"].update(InstanceGroups=[group(r)] * 2),
    "one-channel-without-groups": lambda r: r.update(InputDataConfig=[
        channel("a", ["a"]), channel("b", None)]),
    "channel-names-unknown-group": lambda r: r.update(InputDataConfig=[channel("a", ["nope"])]),
}


def channel(name, groups):
    source = {"S3DataType": "S3Prefix", "S3Uri": f"s3://b/{name}/"}
    if groups is not None:
        source["InstanceGroupNames"] = groups
    return {"ChannelName": name, "DataSource": {"S3DataSource": source}}


@pytest.mark.parametrize("name", HETERO_BREAKS)
def test_hetero_rules_catch(name):
    request = mutated(HETERO_BREAKS[name])
    assert model.validate(model.REQUEST, request) == []  # each break is valid shape by shape
    assert model.hetero_errors(request) != []


def test_hetero_rules_accept_channels_that_all_name_groups():
    request = mutated(lambda r: r.update(InputDataConfig=[channel("a", ["a"]), channel("b", ["a"])]))
    assert model.hetero_errors(request) == []
