"""A job's ``inputs`` and ``outputs`` (gs:// URIs) are validated strictly at submission (zen.core.gcs)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from zen.core.gcs import input_name
from zen.core.models import MAX_INPUTS, JobRequest

BASE = {"user_id": "alice", "cluster": "4xa100-40gb", "command": ["python", "train.py"]}


def request(**fields) -> JobRequest:
    return JobRequest.model_validate_json(json.dumps({**BASE, **fields}))


def test_inputs_with_sizes_and_an_output_prefix_are_accepted_and_kept():
    job = request(inputs=[{"uri": "gs://my-data.example/sets/imagenet/", "size_gb": 140},
                          {"uri": "gs://my_data/tokenizer.json"}, {"uri": "gs://whole-bucket"}],
                  outputs="gs://results-bkt/runs")
    assert [spec.size_gb for spec in job.inputs] == [140.0, None, None]
    assert job.model_dump(mode="json", exclude_none=True)["inputs"][1] == {"uri": "gs://my_data/tokenizer.json"}
    assert [input_name(spec.uri) for spec in job.inputs] == ["imagenet", "tokenizer.json", "whole-bucket"]


@pytest.mark.parametrize("fields, says", [
    ({"inputs": [{"uri": "s3://bucket/x"}]}, "is not a gs:// URI"),
    ({"inputs": [{"uri": "gs://Bucket/x"}]}, "bucket names are 3-63 characters"),
    ({"inputs": [{"uri": "gs://ab/x"}]}, "bucket names are 3-63 characters"),
    ({"inputs": [{"uri": "gs://" + "a" * 64}]}, "at most 63 characters"),
    ({"inputs": [{"uri": "gs://google-data/x"}]}, "start with 'goog'"),
    ({"inputs": [{"uri": "gs://192.168.1.1/x"}]}, "look like an IP address"),
    ({"inputs": [{"uri": "gs://bkt/a/../b"}]}, "'.' or '..' parts"),
    ({"inputs": [{"uri": "gs://bkt/a\nb"}]}, "without CR or LF"),
    ({"inputs": [{"uri": "gs://bkt/x", "size_gb": -1}]}, "greater than or equal to 0"),
    ({"inputs": [{"uri": "gs://bkt/x", "size_gb": "2"}]}, "valid number"),
    ({"inputs": [{"uri": "gs://bkt/x", "size": 2}]}, "Extra inputs are not permitted"),
    ({"inputs": []}, "at least 1 item"),
    ({"inputs": [{"uri": f"gs://bkt/f{i}"} for i in range(MAX_INPUTS + 1)]}, f"at most {MAX_INPUTS} items"),
    ({"inputs": [{"uri": "gs://bkt/a/x"}, {"uri": "gs://bkt/b/x/"}]}, "would both be staged as 'x'"),
    ({"inputs": ["gs://bkt/x"]}, "Input should be an object"),
    ({"outputs": "gs://bkt/../out"}, "'.' or '..' parts"),
    ({"outputs": "gs://results-bkt\n"}, "bucket names are 3-63 characters"),  # "$" matched before a final "\n"
    ({"outputs": ["gs://bkt/out"]}, "valid string"),
])
def test_bad_inputs_and_outputs_are_refused_with_the_reason(fields, says):
    with pytest.raises(ValidationError) as raised:
        request(**fields)
    assert says in str(raised.value)


def test_an_image_is_a_container_image_reference_never_a_docker_option():
    """The agent runs ``docker run [options] IMAGE CMD``: an image such as ``--gpus=all`` would be one
    of the options. Docker's reference grammar (zen.core.images) lets every real image through."""
    for image in ("img:1", "ubuntu", "localhost:5000/a/b:v1.2", "us-docker.pkg.dev/p/r/train@sha256:" + "b" * 64,
                  "gcr.io/p/x_y__z/a-b.c:Tag_1@sha256:" + "c" * 64, "[::1]:5000/x"):
        assert request(image=image).image == image
    for image, says in [("--gpus=all", "starts with '-'"), ("-v", "starts with '-'"),
                        ("a b", "not a container image reference"), ("img:", "not a container image reference"),
                        ("ubuntu;sh", "not a container image reference"), ("x" * 256, "at most 255 characters")]:
        with pytest.raises(ValidationError) as raised:
            request(image=image)
        assert says in str(raised.value), image
