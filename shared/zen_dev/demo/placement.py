"""The demo's two placement jobs: ``hipaa-13``, cleared for an execution group (us-central1 of
``4xa100-40gb`` alone), and ``near-data-14``, placed next to its data in europe-west4. ``check`` lists
what went wrong (a job outside its region, the output missing); ``describe`` says where each ran and why.

The scenario and what each job shows: docs/README.md, "What works today" (``make demo``).
"""

from __future__ import annotations

import sys
from datetime import datetime

CLEARED_REGION = "us-central1"  # zen-demo.yaml: region_tags of 4xa100-40gb
DATA_BUCKET, DATA_LOCATION = "zen-demo-eu-data", "europe-west4"  # never out of GPUs in scenario.yaml
RESULTS_BUCKET = "zen-demo-results"
BUCKETS = {DATA_BUCKET: DATA_LOCATION, RESULTS_BUCKET: "EU"}  # created by the stack in the storage stand-in
INPUT_OBJECT = "corpus/words.txt"
INPUT_TEXT = b"the quick brown fox jumps over the lazy dog\n" * 100
OUTPUT_NAME = "counts.txt"
TAGGED_ID, DATA_ID = "hipaa-13", "near-data-14"
DATA_CLUSTER = "1xl4"

_COUNT_WORDS = (
    "import collections, os, pathlib\n"
    "words = (pathlib.Path(os.environ['ZEN_INPUT_DIR']) / 'words.txt').read_text().split()\n"
    "top = collections.Counter(words).most_common(3)\n"
    "(pathlib.Path(os.environ['ZEN_OUTPUT_DIR']) / 'counts.txt').write_text(repr(top))\n"
    "print('counted', len(words), 'words')\n"
)


def tagged_request() -> dict:
    return {"job_id": TAGGED_ID, "user_id": "clinic", "cluster": "4xa100-40gb", "requires_tags": ["hipaa"],
            "command": [sys.executable, "-c", "import time; time.sleep(3); print('records de-identified')"]}


def data_request() -> dict:
    return {"job_id": DATA_ID, "user_id": "clinic", "cluster": DATA_CLUSTER, "command": [sys.executable, "-c", _COUNT_WORDS],
            "inputs": [{"uri": f"gs://{DATA_BUCKET}/{INPUT_OBJECT}", "size_gb": 50}],
            "outputs": f"gs://{RESULTS_BUCKET}/runs"}


def upload_input() -> None:
    """The data job's input, put in place as a user would (the official client; the stand-in locally)."""
    from google.cloud import storage

    storage.Client().bucket(DATA_BUCKET).blob(INPUT_OBJECT).upload_from_string(INPUT_TEXT)


def data_cluster_quiet(rows: dict[str, dict], instances: list[dict], earlier_ids: list[str]) -> bool:
    """Every earlier job of the data job's cluster is in Zen and over, and none of its VMs is left."""
    over = ("SUCCEEDED", "FAILED", "CANCELLED")
    return (all(job_id in rows and rows[job_id]["status"] in over for job_id in earlier_ids)
            and not any(vm["cluster"] == DATA_CLUSTER for vm in instances))


def output_object() -> tuple[str, bytes | None]:
    """The data job's output (its URI and content, None when missing)."""
    from google.api_core.exceptions import NotFound
    from google.cloud import storage

    name = f"runs/{DATA_ID}/attempt-1/{OUTPUT_NAME}"
    try:
        return f"gs://{RESULTS_BUCKET}/{name}", storage.Client().bucket(RESULTS_BUCKET).blob(name).download_as_bytes()
    except NotFound:
        return f"gs://{RESULTS_BUCKET}/{name}", None


def check(rows: dict[str, dict], output: bytes | None) -> list[str]:
    problems = []
    tagged, data = rows.get(TAGGED_ID), rows.get(DATA_ID)
    if tagged and tagged["region"] != CLEARED_REGION:
        problems.append(f"{TAGGED_ID} requires [hipaa] but ran in {tagged['region']}, not its cleared region "
                        f"{CLEARED_REGION}")
    if data and data["region"] != DATA_LOCATION:
        problems.append(f"{DATA_ID} ran in {data['region']}, away from its data in {DATA_LOCATION} (which had GPUs)")
    if data and data["status"] == "SUCCEEDED":
        message = data["message"] or ""
        if "staged 1 file" not in message or "uploaded 1 file" not in message:
            problems.append(f"{DATA_ID}: no staging or upload reported ({message[-200:]!r})")
        if output is None or b"'the', 200" not in output:
            problems.append(f"{DATA_ID}: its output {OUTPUT_NAME} is missing from gs://{RESULTS_BUCKET} or wrong "
                            f"({output!r})")
    return problems


def _waited(row: dict) -> str:
    if not row.get("started_at"):
        return "never started"
    seconds = (datetime.fromisoformat(row["started_at"]) - datetime.fromisoformat(row["submitted_at"])).total_seconds()
    return f"started {seconds:.0f}s after submission"


def describe(config, rows: dict[str, dict], output_uri: str, output: bytes | None) -> list[str]:
    """Where the two jobs ran and why, one paragraph each."""
    from zen.core.locality import bucket_location, egress_usd
    from zen.core.models import InputSpec

    lines = []
    tagged = rows.get(TAGGED_ID)
    if tagged:
        cluster = config.cluster(tagged["cluster"])
        groups = ", ".join(f"{r}: [{', '.join(cluster.tags_of(r))}]" for r in cluster.regions)
        elsewhere = sorted({r["region"] for job_id, r in rows.items() if job_id != TAGGED_ID and r["region"]
                            and r["started_at"] and r["started_at"] < (tagged["started_at"] or "~")})
        lines += [f"  {TAGGED_ID:<13} {tagged['status']} in {tagged['region'] or '-'}; {_waited(tagged)}",
                  f"  {'':<13} why: requires_tags [hipaa]; tags of {cluster.name} by region: {groups}, so its "
                  f"only region is {', '.join(tagged['regions'])}, stocked out at first: it waited for it while "
                  f"the jobs started before it ran in {', '.join(elsewhere) or '-'}"]
    data = rows.get(DATA_ID)
    if data:
        inputs = [InputSpec.model_validate(spec) for spec in data_request()["inputs"]]
        location = bucket_location(config, DATA_BUCKET)
        priced = {r: egress_usd(config, r, inputs) for r in data["regions"]}
        costs = ", ".join(f"{r} ${usd:.2f}" for r, (_, usd, _) in priced.items())
        lines += [f"  {DATA_ID:<13} {data['status']} in {data['region'] or '-'}; {_waited(data)}",
                  f"  {'':<13} why: input gs://{DATA_BUCKET}/{INPUT_OBJECT} (50 GB declared) is in "
                  f"{location or 'an unknown location'} (looked up in the storage stand-in), so its regions are "
                  f"ordered {', '.join(data['regions'])}; egress by region: {costs}",
                  f"  {'':<13} on the VM: {_staging_line(data['message'])}; output {output_uri}: "
                  f"{output.decode() if output else 'MISSING'}"]
    return lines


def _staging_line(message: str | None) -> str:
    found = [line for line in (message or "").splitlines() if line.startswith("zen: staged")]
    return found[-1].removeprefix("zen: ") if found else "no staging reported"
