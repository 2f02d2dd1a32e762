"""Every rendered CreateTrainingJob request is one the SageMaker service accepts."""

import copy
import json
import os
import pathlib
import subprocess
import tomllib

import botocore.validate
import pytest

import sagemaker_model as model

REPO = pathlib.Path(os.environ.get("HETGEN_REPO", pathlib.Path(__file__).resolve().parents[2]))
EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


def hetgen():
    binary = os.environ.get("HETGEN_BIN")
    if not binary:
        pytest.fail("set HETGEN_BIN to the built hetgen binary (make test does)")
    return binary


def render(example, out):
    subprocess.run([hetgen(), "render", str(example), "--out", str(out)], check=True,
                   capture_output=True)
    (job_dir,) = out.iterdir()
    return job_dir


def test_examples_exist():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_request(example, tmp_path):
    job_dir = render(example, tmp_path)
    request_file = job_dir / "create-training-job.json"
    spec = tomllib.loads(example.read_text())
    if "sagemaker" not in spec:
        assert not request_file.exists(), "a local-only job renders no SageMaker request"
        return
    request = json.loads(request_file.read_text())
    assert model.validate(request) == []
    report = botocore.validate.ParamValidator().validate(request, model.input_shape())
    assert not report.has_errors(), report.generate_report()
    assert model.hetero_errors(request) == []
    groups = spec["instance_group"]
    if len(groups) > 1:
        rendered = request["ResourceConfig"]["InstanceGroups"]
        assert [g["InstanceGroupName"] for g in rendered] == [g["name"] for g in groups]


def test_catalog_types_are_sagemaker_training_types():
    catalog = tomllib.loads((REPO / "generator/spec/data/instances.toml").read_text())
    types = [i["type"] for i in catalog["instance"]]
    unknown = sorted(set(types) - set(model.enum("TrainingInstanceType")))
    assert types and unknown == []


MINIMAL = {
    "TrainingJobName": "minimal-job",
    "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
    "AlgorithmSpecification": {"TrainingImage": "img:latest", "TrainingInputMode": "File"},
    "OutputDataConfig": {"S3OutputPath": "s3://b/o/"},
    "ResourceConfig": {
        "InstanceGroups": [{"InstanceType": "ml.c5.xlarge", "InstanceCount": 1,
                            "InstanceGroupName": "a"}],
        "VolumeSizeInGB": 30,
    },
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
}


def test_minimal_request_is_valid():
    assert model.validate(MINIMAL) == []


def mutated(change):
    request = copy.deepcopy(MINIMAL)
    change(request)
    return request


MUTATIONS = {
    "name-too-long": lambda r: r.update(TrainingJobName="a" * 64),
    "name-underscore": lambda r: r.update(TrainingJobName="bad_name"),
    "role-arn": lambda r: r.update(RoleArn="arn:aws:iam::1234:role/x"),
    "instance-type": lambda r: r["ResourceConfig"]["InstanceGroups"][0].update(InstanceType="ml.x"),
    "six-groups": lambda r: r["ResourceConfig"].update(
        InstanceGroups=r["ResourceConfig"]["InstanceGroups"] * 6),
    "tag-key": lambda r: r.update(Tags=[{"Key": "bad#key", "Value": "v"}]),
    "101-hyperparameters": lambda r: r.update(HyperParameters={f"k{i}": "v" for i in range(101)}),
    "long-hyperparameter": lambda r: r.update(HyperParameters={"k": "v" * 2501}),
    "environment-key": lambda r: r.update(Environment={"1BAD": "x"}),
    "unknown-member": lambda r: r.update(NotAMember=1),
    "wrong-type": lambda r: r["ResourceConfig"]["InstanceGroups"][0].update(InstanceCount="1"),
    "missing-required": lambda r: r.pop("RoleArn"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_validator_catches(name):
    assert model.validate(mutated(MUTATIONS[name])) != []


def test_hetero_rules_catch_mixed_forms():
    request = mutated(lambda r: r["ResourceConfig"].update(InstanceType="ml.c5.xlarge"))
    assert model.hetero_errors(request) != []
    request = mutated(lambda r: r.update(InputDataConfig=[
        {"ChannelName": "a", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": "s3://b/a/", "InstanceGroupNames": ["a"]}}},
        {"ChannelName": "b", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": "s3://b/b/"}}},
    ]))
    assert model.hetero_errors(request) != []
