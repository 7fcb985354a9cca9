#!/usr/bin/env python3
"""Capture the wire format of a running Dynamo 1.6.1 stack as fixtures for sy-wire / sy-sim.

Run through the wrapper (starts and stops the stack when needed):

    scripts/capture-dynamo-fixtures.sh

or directly against a stack already started with `scripts/dynamo-local.sh start`:

    .dynamo/venv/bin/python scripts/capture-dynamo-fixtures.py [--out DIR]

Every exchange NAME is saved as NAME.request.json (the body we sent, if any) and NAME.response.json /
NAME.response.sse / NAME.response.txt (the body exactly as received: raw bytes, so u64 worker ids and
float formatting are Dynamo's own). index.json lists every exchange (method, path, status, content type,
files, what it shows); README.md is generated from it. The script asserts the status codes and the
invariants it relies on (cached_tokens == overlap, /loads back to zero), so a changed Dynamo fails loudly.

Only 127.0.0.1 is contacted. Uses the standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "crates/sy-wire/tests/fixtures/dynamo-1.6.1"
FE = f"http://127.0.0.1:{os.environ.get('FRONTEND_PORT', '18000')}"
SEL = f"http://127.0.0.1:{os.environ.get('SELECT_PORT', '18092')}"
SYS_BASE = int(os.environ.get("WORKER_SYS_PORT_BASE", "18100"))
BLOCK = 16
VOCAB_LO, VOCAB_HI = 5, 4000  # ids 0..4 are special tokens in the tiny model; vocabulary is 4096
rng = random.Random(int(time.time()))


def fresh_tokens(n: int) -> list[int]:
    """Token ids nobody sent before (random per run), so no unplanned cache hits."""
    return [rng.randrange(VOCAB_LO, VOCAB_HI) for _ in range(n)]


class Capture:
    def __init__(self, out: Path):
        self.out = out
        self.index: list[dict] = []
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.request.json"):
            old.unlink()
        for pattern in ("*.response.json", "*.response.sse", "*.response.txt"):
            for old in out.glob(pattern):
                old.unlink()

    def call(self, name: str, method: str, base: str, path: str, body=None, *, expect: int | tuple[int, ...],
             about: str, timeout: float = 30.0) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"} if body is not None else {}
        req = urllib.request.Request(base + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, ctype, raw = r.status, r.headers.get("content-type", ""), r.read()
        except urllib.error.HTTPError as e:
            status, ctype, raw = e.code, e.headers.get("content-type", ""), e.read()
        if status not in (expect if isinstance(expect, tuple) else (expect,)):
            sys.exit(f"capture: {name}: {method} {path} answered HTTP {status}, expected {expect}: {raw[:400]!r}")
        entry = {"name": name, "method": method, "service": "frontend" if base == FE else
                 ("selection" if base == SEL else "worker"), "path": path, "status": status,
                 "content_type": ctype, "about": about}
        if body is not None:
            req_file = f"{name}.request.json"
            # Long token lists stay on one line so the file remains readable.
            (self.out / req_file).write_text(json.dumps(body) + "\n")
            entry["request"] = req_file
        ext = "sse" if "event-stream" in ctype else ("json" if "json" in ctype else "txt")
        resp_file = f"{name}.response.{ext}"
        (self.out / resp_file).write_bytes(raw)
        entry["response"] = resp_file
        self.index.append(entry)
        return status, raw

    def save(self, name, method, base, path, body, status, ctype, raw: bytes, about: str) -> None:
        """Record an exchange performed by hand (e.g. a stream read while a fault is injected)."""
        (self.out / f"{name}.request.json").write_text(json.dumps(body) + "\n")
        ext = "sse" if "event-stream" in ctype else ("json" if "json" in ctype else "txt")
        (self.out / f"{name}.response.{ext}").write_bytes(raw)
        self.index.append({"name": name, "method": method, "service": "frontend" if base == FE else "selection",
                           "path": path, "status": status, "content_type": ctype, "about": about,
                           "request": f"{name}.request.json", "response": f"{name}.response.{ext}"})

    def note(self, name: str, about: str, value) -> None:
        """A derived fact checked during the capture (kept in index.json for the reader)."""
        self.index.append({"name": name, "note": about, "value": value})


def sse_events(raw: bytes) -> list:
    events = []
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def wait_kv_events(model: str, worker: int, tokens: list[int], want_gpu: int) -> dict:
    """The selection service learns cache contents from KV events (asynchronous): poll until it knows."""
    body = {"model_name": model, "token_ids": tokens, "advisory": True}
    for _ in range(100):
        req = urllib.request.Request(SEL + "/overlap_scores", json.dumps(body).encode(),
                                     {"content-type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            scores = json.loads(r.read())
        for w in scores["workers"]:
            if w["worker_id"] == worker and w["device_blocks"] * BLOCK >= want_gpu:
                return scores
        time.sleep(0.05)
    sys.exit(f"capture: the selection service never saw {want_gpu} cached tokens on worker {worker}")


def launcher(*args: str) -> None:
    subprocess.run([str(REPO / "scripts/dynamo-local.sh"), *args], check=True, stdout=subprocess.DEVNULL)


def worker_ids_by_name() -> dict[str, int]:
    run_dir = Path(os.environ.get("RUN_DIR", REPO / ".dynamo/run"))
    return {w["name"]: w["worker_id"] for w in json.loads((run_dir / "workers.json").read_text())}


def capture_faults(cap: Capture) -> None:
    """What a client sees when a worker dies: pinned to a dead worker, killed mid-stream."""
    victim = worker_ids_by_name()["efficient-w1"]
    # 1. killed in the middle of a stream (no --migration-limit): an error event inside the 200 stream.
    body = {"model": "efficient", "prompt": fresh_tokens(40), "max_tokens": 4000, "stream": True,
            "stream_options": {"include_usage": True},
            "nvext": {"backend_instance_id": victim, "extra_fields": ["worker_id"]}}
    conn = http.client.HTTPConnection("127.0.0.1", int(FE.rsplit(":", 1)[1]), timeout=60)
    conn.request("POST", "/v1/completions", json.dumps(body), {"content-type": "application/json"})
    resp = conn.getresponse()
    raw, events = b"", 0
    while True:
        line = resp.readline()
        if not line:
            break
        raw += line
        if line.startswith(b"data: "):
            events += 1
            if events == 5:
                launcher("kill-worker", "efficient-w1")
    conn.close()
    cap.save("fault.worker_killed_mid_stream", "POST", FE, "/v1/completions", body, resp.status,
             resp.headers.get("content-type", ""), raw,
             "worker killed with SIGKILL after 5 streamed tokens (no migration): token events, then "
             "data: {\"error\": {...}}, then [DONE], all inside HTTP 200")
    ev = sse_events(raw)
    assert any(isinstance(e, dict) and "error" in e for e in ev) and ev[-1] == "[DONE]", ev[-3:]
    # 2. a new request pinned to the dead worker while the frontend still lists it.
    statuses = {}
    for when, delay in (("now", 0.0), ("after_2s", 2.0)):
        time.sleep(delay)
        st, _ = cap.call(f"fault.pinned_to_dead_worker.{when}", "POST", FE, "/v1/completions",
                         {"model": "efficient", "prompt": fresh_tokens(40), "max_tokens": 2,
                          "nvext": {"backend_instance_id": victim}}, expect=(500, 503),
                         about=f"non-streamed request pinned to the killed worker ({when}), while /health still lists it: 5xx JSON body")
        st2, _ = cap.call(f"fault.pinned_to_dead_worker.{when}.stream", "POST", FE, "/v1/completions",
                          {"model": "efficient", "prompt": fresh_tokens(40), "max_tokens": 2, "stream": True,
                           "nvext": {"backend_instance_id": victim}}, expect=(200, 500, 503),
                          about=f"streamed request pinned to the killed worker ({when}): the status and body seen")
        statuses[when] = {"nonstream": st, "stream": st2}
    cap.note("fault.pinned_to_dead_worker", "HTTP status of requests pinned to the killed worker", statuses)
    cap.call("fault.health_after_kill", "GET", FE, "/health", expect=200,
             about="/health right after the kill: the dead instance is still listed (about 9 s)")
    cap.call("fault.select_workers_after_kill", "GET", SEL, "/workers", expect=200,
             about="the selection service after the kill: nobody told it, the dead worker stays registered")
    # 3. back with a new instance id; the launcher registers it and deletes the stale id.
    launcher("start-worker", "efficient-w1")
    new_id = worker_ids_by_name()["efficient-w1"]
    assert new_id != victim, "a restarted worker must come back with a new instance id"
    cap.call("fault.select_workers_after_restart", "GET", SEL, "/workers", expect=200,
             about="after the restart: the new instance id registered, the stale one deleted")
    cap.note("fault.restart_new_id", "efficient-w1's instance id before the kill and after the restart",
             {"before": victim, "after": new_id})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--no-faults", action="store_true",
                    help="skip the fault captures (they kill -9 and restart efficient-w1 via scripts/dynamo-local.sh)")
    args = ap.parse_args()
    cap = Capture(args.out)

    workers = get_json(SEL + "/workers")
    by_model: dict[str, list[int]] = {}
    for w in workers:
        by_model.setdefault(w["model_name"], []).append(w["worker_id"])
    for m in ("efficient", "capable"):
        if len(by_model.get(m, [])) < 2:
            sys.exit(f"capture: the selection service lists {by_model.get(m)} for {m}; start the stack first")
    eff_a, eff_b = sorted(by_model["efficient"])
    cap_a, cap_b = sorted(by_model["capable"])

    # ------------------------------------------------------------------ frontend: discovery
    cap.call("frontend.models", "GET", FE, "/v1/models", expect=200,
             about="GET /v1/models: one entry per served model")
    cap.call("frontend.health", "GET", FE, "/health", expect=200,
             about="GET /health: instances[] with namespace (= model here), endpoint, instance_id (u64)")

    # ------------------------------------------------------------------ frontend: completions
    p = fresh_tokens(40)
    cap.call("completions.nonstream", "POST", FE, "/v1/completions",
             {"model": "efficient", "prompt": p, "max_tokens": 4}, expect=200,
             about="non-streamed completion with a token-id prompt; usage.prompt_tokens_details.cached_tokens")
    cap.call("completions.nonstream.extra_fields", "POST", FE, "/v1/completions",
             {"model": "efficient", "prompt": fresh_tokens(40), "max_tokens": 4,
              "nvext": {"extra_fields": ["worker_id", "timing"]}}, expect=200,
             about="non-streamed completion with nvext.extra_fields worker_id + timing")
    cap.call("completions.stream", "POST", FE, "/v1/completions",
             {"model": "efficient", "prompt": fresh_tokens(40), "max_tokens": 4, "stream": True}, expect=200,
             about="streamed completion: one SSE data event per token, finish_reason on the last, then [DONE]")
    _, raw = cap.call("completions.stream.usage_extra_fields", "POST", FE, "/v1/completions",
                      {"model": "capable", "prompt": fresh_tokens(40), "max_tokens": 4, "stream": True,
                       "stream_options": {"include_usage": True},
                       "nvext": {"extra_fields": ["worker_id", "timing"]}}, expect=200,
                      about="streamed completion with stream_options.include_usage (final chunk with empty "
                            "choices and usage incl. cached_tokens) and extra_fields worker_id (every chunk) "
                            "+ timing (last content chunk)")
    ev = sse_events(raw)
    assert ev[-1] == "[DONE]" and ev[-2]["usage"]["prompt_tokens"] == 40, ev[-2:]

    # ------------------------------------------------------------------ frontend: chat
    cap.call("chat.nonstream", "POST", FE, "/v1/chat/completions",
             {"model": "efficient", "messages": [{"role": "user", "content": "ignored: nvext.token_data wins"}],
              "max_tokens": 4, "nvext": {"token_data": fresh_tokens(40)}}, expect=200,
             about="non-streamed chat completion with a token-exact prompt in nvext.token_data")
    _, raw = cap.call("chat.stream.usage_extra_fields", "POST", FE, "/v1/chat/completions",
                      {"model": "efficient", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
                       "stream": True, "stream_options": {"include_usage": True},
                       "nvext": {"token_data": fresh_tokens(40), "extra_fields": ["worker_id", "timing"]}},
                      expect=200,
                      about="streamed chat completion (delta.content chunks; first chunk carries role) with "
                            "include_usage and extra_fields")
    ev = sse_events(raw)
    assert ev[-2]["usage"]["prompt_tokens"] == 40, ev[-2]
    cap.call("chat.stream.text_prompt", "POST", FE, "/v1/chat/completions",
             {"model": "capable", "messages": [{"role": "user", "content": "hello world"}], "max_tokens": 3,
              "stream": True}, expect=200,
             about="streamed chat completion with a text prompt (templated and tokenized by the frontend)")

    # ------------------------------------------------------------------ pinning, annotation
    p = fresh_tokens(48)
    _, raw = cap.call("completions.pinned", "POST", FE, "/v1/completions",
                      {"model": "efficient", "prompt": p, "max_tokens": 2,
                       "nvext": {"backend_instance_id": eff_b, "extra_fields": ["worker_id"]}}, expect=200,
                      about="nvext.backend_instance_id pins the request to one worker (reported in nvext.worker_id)")
    served = json.loads(raw)["nvext"]["worker_id"]["decode_worker_id"]
    assert served == eff_b, (served, eff_b)
    cap.call("completions.pinned.unknown_instance", "POST", FE, "/v1/completions",
             {"model": "efficient", "prompt": p, "max_tokens": 2, "nvext": {"backend_instance_id": 12345}},
             expect=400, about="backend_instance_id that no worker has: 400 before anything starts")
    cap.call("completions.query_instance_id.stream", "POST", FE, "/v1/completions",
             {"model": "efficient", "prompt": p, "max_tokens": 2, "stream": True,
              "nvext": {"annotations": ["query_instance_id:"]}}, expect=200,
             about="annotation query_instance_id: (trailing colon) streamed: one chunk with nvext.worker_id "
                   "(the router's pick) and nvext.token_ids, no inference, nothing booked")
    _, raw = cap.call("completions.query_instance_id", "POST", FE, "/v1/completions",
                      {"model": "efficient", "prompt": p, "max_tokens": 2,
                       "nvext": {"annotations": ["query_instance_id:"]}}, expect=200,
                      about="annotation query_instance_id: non-streamed: same chunk as a JSON body")
    pick = json.loads(raw)["nvext"]["worker_id"]["decode_worker_id"]
    # p (48 tokens = 3 full blocks) is cached on eff_b only, so the router's pick is exact here.
    cap.note("query_instance_id.pick", "the router's pick for a prompt cached on one worker is that worker",
             {"pick": pick, "cached_on": eff_b, "agree": pick == eff_b})
    cap.call("chat.query_instance_id", "POST", FE, "/v1/chat/completions",
             {"model": "efficient", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
              "nvext": {"token_data": p, "annotations": ["query_instance_id:"]}}, expect=200,
             about="annotation query_instance_id: on chat completions")

    # ------------------------------------------------------------------ errors
    cap.call("completions.unknown_model", "POST", FE, "/v1/completions",
             {"model": "no-such-model", "prompt": fresh_tokens(8), "max_tokens": 2}, expect=404,
             about="unknown model: 404 {message, type, code}")
    cap.call("completions.unknown_model.stream", "POST", FE, "/v1/completions",
             {"model": "no-such-model", "prompt": fresh_tokens(8), "max_tokens": 2, "stream": True}, expect=404,
             about="unknown model, streamed request: still a plain 404 JSON body (the stream never starts)")
    cap.call("chat.unknown_model", "POST", FE, "/v1/chat/completions",
             {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
             expect=404, about="unknown model on chat completions")
    cap.call("chat.empty_messages", "POST", FE, "/v1/chat/completions",
             {"model": "efficient", "messages": [], "max_tokens": 2, "nvext": {"token_data": fresh_tokens(8)}},
             expect=400, about="validation error: 400 with the reason in message")
    too_big = [VOCAB_LO + (i % (VOCAB_HI - VOCAB_LO)) for i in range(1024 * BLOCK + 600)]
    cap.call("completions.too_large", "POST", FE, "/v1/completions",
             {"model": "capable", "prompt": too_big, "max_tokens": 2}, expect=500,
             about="prompt larger than the worker's KV capacity (1024 blocks x 16), non-streamed: HTTP 500")
    _, raw = cap.call("completions.too_large.stream", "POST", FE, "/v1/completions",
                      {"model": "capable", "prompt": too_big, "max_tokens": 2, "stream": True}, expect=200,
                      about="the same, streamed: HTTP 200 text/event-stream with a data: {\"error\": {...}} "
                            "event, then [DONE]")
    ev = sse_events(raw)
    assert "error" in ev[0] and ev[-1] == "[DONE]", ev

    # ------------------------------------------------------------------ selection service: workers
    cap.call("select.workers.list", "GET", SEL, "/workers", expect=200,
             about="GET /workers: registrations with lifecycle, total_kv_blocks, max_num_batched_tokens")
    cap.call("select.ready", "GET", SEL, "/ready", expect=200,
             about="GET /ready: ready, schedulable_workers, workers[]")
    probe_id = 2**63 + 12345  # above 2^53 and i64::MAX: must survive as u64
    reg = {"worker_id": probe_id, "model_name": "fixture-probe", "routing_group": "default",
           "endpoint": f"dyn://fixture-probe.backend.generate/{probe_id}", "block_size": BLOCK,
           "data_parallel_start_rank": 0, "data_parallel_size": 1,
           "kv_events_endpoints": {"0": "tcp://127.0.0.1:18299"},
           "total_kv_blocks": 512, "max_num_batched_tokens": 4096}
    cap.call("select.workers.register", "POST", SEL, "/workers", reg, expect=201,
             about="POST /workers: register a worker with its KV-event endpoint and capacities")
    cap.call("select.workers.register.again", "POST", SEL, "/workers", reg, expect=201,
             about="POST /workers for an id already registered: accepted again (201)")
    reg2 = dict(reg, worker_id=probe_id + 1, endpoint=f"dyn://fixture-probe.backend.generate/{probe_id + 1}")
    del reg2["max_num_batched_tokens"]
    cap.call("select.workers.register.no_capacity", "POST", SEL, "/workers", reg2, expect=201,
             about="POST /workers without max_num_batched_tokens: accepted; the capacity silently becomes "
                   "10,000,000 (see select.workers.list.with_probes)")
    _, raw = cap.call("select.workers.list.with_probes", "GET", SEL, "/workers", expect=200,
                      about="GET /workers with the two fixture-probe registrations")
    sentinel = [w["max_num_batched_tokens"] for w in json.loads(raw) if w["worker_id"] == probe_id + 1]
    _, raw2 = cap.call("select.select.probe_model", "POST", SEL, "/select",
                       {"model_name": "fixture-probe", "token_ids": fresh_tokens(40), "advisory": True},
                       expect=200, about="advisory /select on a model whose workers never published KV events "
                                         "(fixture-probe)")
    capacities = {w["worker_id"]: w["max_num_batched_tokens"] for w in json.loads(raw)
                  if w["model_name"] == "fixture-probe"}
    pick = json.loads(raw2)
    cap.note("workers.missing_capacity",
             "a worker registered without max_num_batched_tokens: /workers shows null, and an advisory /select "
             "that picks it reports worker_load.prefill_token_capacity 10,000,000 (treat as invalid)",
             {"workers_max_num_batched_tokens": sentinel, "picked_registered_capacity": capacities[pick["worker_id"]],
              "picked_prefill_token_capacity": pick["worker_load"]["prefill_token_capacity"]})
    cap.call("select.workers.register.incomplete", "POST", SEL, "/workers", {"worker_id": 1}, expect=201,
             about="POST /workers with only worker_id: accepted as lifecycle \"incomplete\" under model "
                   "\"default\", every other field null")
    cap.call("select.workers.register.invalid", "POST", SEL, "/workers", {"model_name": "x"}, expect=422,
             about="POST /workers without worker_id: 422 {error}")
    cap.call("select.workers.delete.incomplete", "DELETE", SEL, "/workers/1", expect=200,
             about="DELETE /workers/{id} (cleanup)")
    cap.call("select.workers.delete", "DELETE", SEL, f"/workers/{probe_id}", expect=200,
             about="DELETE /workers/{id}")
    cap.call("select.workers.delete.again", "DELETE", SEL, f"/workers/{probe_id}", expect=404,
             about="DELETE /workers/{id} of an unknown id: 404")
    cap.call("select.workers.delete.no_capacity", "DELETE", SEL, f"/workers/{probe_id + 1}", expect=200,
             about="DELETE /workers/{id} (cleanup)")

    # ------------------------------------------------------------------ selection service: queries
    q = fresh_tokens(40)
    cap.call("select.select", "POST", SEL, "/select", {"model_name": "efficient", "token_ids": q}, expect=200,
             about="query-only /select: worker_id, dp_rank, endpoint, block_size, overlap (tokens), "
                   "effective_prefill_tokens, potential_decode_blocks; books nothing")
    cap.call("select.select.advisory", "POST", SEL, "/select",
             {"model_name": "efficient", "token_ids": q, "advisory": True}, expect=200,
             about="advisory /select: adds worker_load {active_prefill_tokens, prefill_token_capacity, "
                   "total_kv_blocks}")
    cap.call("select.select.unknown_model", "POST", SEL, "/select",
             {"model_name": "no-such-model", "token_ids": q}, expect=503,
             about="unknown model (no schedulable workers): 503 {error}")
    cap.call("select.select.no_tokens", "POST", SEL, "/select", {"model_name": "efficient"}, expect=400,
             about="neither token_ids nor block_hashes: 400 {error}")
    cap.call("select.potential_loads", "POST", SEL, "/potential_loads",
             {"model_name": "efficient", "token_ids": q}, expect=200,
             about="POST /potential_loads: per worker booked + this prompt's uncached prefill tokens")
    cap.call("select.overlap_scores", "POST", SEL, "/overlap_scores",
             {"model_name": "efficient", "token_ids": q}, expect=200,
             about="POST /overlap_scores: per worker device/host/disk blocks (blocks, not tokens)")
    cap.call("select.loads.idle", "GET", SEL, "/loads?model_name=efficient", expect=200,
             about="GET /loads?model_name=: booked load per worker, pending_count, pending_isl_tokens")

    # ------------------------------------------------------------------ reservations: lifecycle
    r = fresh_tokens(300)
    _, raw = cap.call("select.select_and_reserve", "POST", SEL, "/select_and_reserve",
                      {"model_name": "capable", "token_ids": r, "selection_id": "fixture-res-1"}, expect=200,
                      about="POST /select_and_reserve: selects and books under selection_id (answer as /select "
                            "plus selection_id)")
    booked_on = json.loads(raw)["worker_id"]
    _, raw = cap.call("select.loads.reserved", "GET", SEL, "/loads?model_name=capable", expect=200,
                      about="GET /loads with one 300-token reservation: potential_prefill_tokens 300, "
                            "active_requests 1 on the booked worker")
    row = [w for w in json.loads(raw)[0]["loads"] if w["worker_id"] == booked_on][0]
    assert row["potential_prefill_tokens"] == 300 and row["active_requests"] == 1, row
    _, raw = cap.call("select.select.advisory.busy", "POST", SEL, "/select",
                      {"model_name": "capable", "token_ids": r, "advisory": True}, expect=200,
                      about="advisory /select of the same prompt while one worker holds the reservation: picks "
                            "the idle worker and reports its worker_load")
    cap.call("select.loads.all", "GET", SEL, "/loads", expect=200, about="GET /loads without model_name: every model")
    cap.call("select.select_and_reserve.reuse", "POST", SEL, "/select_and_reserve",
             {"model_name": "capable", "token_ids": r, "selection_id": "fixture-res-1"}, expect=409,
             about="selection_id already in use: 409 {error}")
    cap.call("select.select_and_reserve.unknown_model", "POST", SEL, "/select_and_reserve",
             {"model_name": "no-such-model", "token_ids": r, "selection_id": "fixture-res-x"}, expect=503,
             about="select_and_reserve on an unknown model: 503 {error}")
    cap.call("select.prefill_complete", "POST", SEL, "/reservations/fixture-res-1/prefill_complete", expect=200,
             about="POST /reservations/{id}/prefill_complete: the booked prefill tokens are released")
    cap.call("select.loads.after_prefill_complete", "GET", SEL, "/loads?model_name=capable", expect=200,
             about="GET /loads after prefill_complete: potential_prefill_tokens 0, request still active")
    cap.call("select.output_block", "POST", SEL, "/reservations/fixture-res-1/output_block", {}, expect=200,
             about="POST /reservations/{id}/output_block (JSON body required): one decode block generated")
    cap.call("select.prefill_complete.unknown", "POST", SEL, "/reservations/no-such-id/prefill_complete",
             expect=404, about="prefill_complete of an unknown reservation: 404 {error}")
    cap.call("select.reservation.delete", "DELETE", SEL, "/reservations/fixture-res-1", expect=200,
             about="DELETE /reservations/{id}: frees the booked load")
    cap.call("select.reservation.delete.again", "DELETE", SEL, "/reservations/fixture-res-1", expect=404,
             about="second DELETE of the same reservation: 404 {error}")

    # /reservations, replay form: a /select with selection_id, then book that selection
    s = fresh_tokens(100)
    cap.call("select.select.with_selection_id", "POST", SEL, "/select",
             {"model_name": "efficient", "token_ids": s, "selection_id": "fixture-res-2"}, expect=200,
             about="/select with selection_id: caches the selection for a later POST /reservations")
    cap.call("select.reservations.replay", "POST", SEL, "/reservations",
             {"selection_id": "fixture-res-2", "model_name": "efficient"}, expect=201,
             about="POST /reservations replay form {selection_id, model_name}: books the cached selection")
    cap.call("select.reservations.replay.unknown", "POST", SEL, "/reservations",
             {"selection_id": "never-selected", "model_name": "efficient"}, expect=404,
             about="replay form without a cached selection: 404 {error}")
    # explicit form: worker_id + prompt
    cap.call("select.reservations.explicit", "POST", SEL, "/reservations",
             {"selection_id": "fixture-res-3", "model_name": "efficient", "worker_id": eff_a, "token_ids": s},
             expect=201, about="POST /reservations explicit form {selection_id, model_name, worker_id, token_ids}")
    _, raw = cap.call("select.loads.replay_and_explicit", "GET", SEL, "/loads?model_name=efficient", expect=200,
                      about="GET /loads with one replayed and one explicit 100-token reservation")
    cap.note("reservations.explicit_books_prefill",
             "potential_prefill_tokens per worker with the replayed (100 tokens) and explicit reservations; "
             "on 1.6.1 the explicit form was seen to book the request and decode blocks but no prefill tokens",
             {str(w["worker_id"]): w["potential_prefill_tokens"] for w in json.loads(raw)[0]["loads"]})
    cap.call("select.reservations.explicit.unknown_worker", "POST", SEL, "/reservations",
             {"selection_id": "fixture-res-4", "model_name": "efficient", "worker_id": 1234, "token_ids": s},
             expect=404, about="explicit form with a worker that is not registered: 404 {error}")
    cap.call("select.reservations.missing_selection_id", "POST", SEL, "/reservations",
             {"model_name": "efficient", "worker_id": eff_a}, expect=422,
             about="POST /reservations without selection_id: 422 {error}")
    cap.call("select.reservation.delete.replay", "DELETE", SEL, "/reservations/fixture-res-2", expect=200,
             about="DELETE (cleanup)")
    cap.call("select.reservation.delete.explicit", "DELETE", SEL, "/reservations/fixture-res-3", expect=200,
             about="DELETE (cleanup)")

    # ------------------------------------------------------------------ the accounting loop with a cache hit
    prefix = fresh_tokens(64)  # 4 full blocks
    cap.call("loop.prime", "POST", FE, "/v1/completions",
             {"model": "efficient", "prompt": prefix, "max_tokens": 1, "nvext": {"backend_instance_id": eff_a}},
             expect=200, about="prime a 64-token prefix on one efficient worker (pinned)")
    probe = prefix + fresh_tokens(36)
    wait_kv_events("efficient", eff_a, probe, 64)
    _, raw = cap.call("loop.overlap_scores", "POST", SEL, "/overlap_scores",
                      {"model_name": "efficient", "token_ids": probe}, expect=200,
                      about="overlap_scores after priming: device_blocks 4 on the primed worker")
    cap.call("loop.select.advisory", "POST", SEL, "/select",
             {"model_name": "efficient", "token_ids": probe, "advisory": True}, expect=200,
             about="advisory /select after priming: overlap.gpu 64 tokens, effective_prefill_tokens 36")
    cap.call("loop.potential_loads", "POST", SEL, "/potential_loads",
             {"model_name": "efficient", "token_ids": probe}, expect=200,
             about="potential_loads after priming: the primed worker's potential prefill is only the uncached part")
    _, raw = cap.call("loop.select_and_reserve", "POST", SEL, "/select_and_reserve",
                      {"model_name": "efficient", "token_ids": probe, "selection_id": "fixture-loop-1"},
                      expect=200, about="the probe's reservation (books 36 uncached prefill tokens)")
    sel = json.loads(raw)
    assert sel["worker_id"] == eff_a and sel["overlap"]["gpu"] == 64, sel
    _, raw = cap.call("loop.completion", "POST", FE, "/v1/completions",
                      {"model": "efficient", "prompt": probe, "max_tokens": 4, "stream": True,
                       "stream_options": {"include_usage": True},
                       "nvext": {"backend_instance_id": sel["worker_id"], "extra_fields": ["worker_id", "timing"]}},
                      expect=200, about="the probe, pinned to the reserved worker: cached_tokens == overlap.gpu")
    ev = sse_events(raw)
    usage = ev[-2]["usage"]
    served = ev[0]["nvext"]["worker_id"]["decode_worker_id"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == sel["overlap"]["gpu"] == 64, usage
    assert served == sel["worker_id"], (served, sel["worker_id"])
    cap.note("loop.agreement", "reserved worker, served worker, overlap.gpu and cached_tokens",
             {"reserved": sel["worker_id"], "served": served, "overlap_gpu": sel["overlap"]["gpu"],
              "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]})
    cap.call("loop.prefill_complete", "POST", SEL, "/reservations/fixture-loop-1/prefill_complete", expect=200,
             about="prefill_complete at the first token")
    cap.call("loop.delete", "DELETE", SEL, "/reservations/fixture-loop-1", expect=200,
             about="DELETE at the end of the stream")
    _, raw = cap.call("loop.loads.after", "GET", SEL, "/loads", expect=200,
                      about="GET /loads after every reservation was deleted: all zero")
    for model in json.loads(raw):
        assert model["pending_count"] == 0, model
        for w in model["loads"]:
            assert w["potential_prefill_tokens"] == 0 and w["active_requests"] == 0, model

    if not args.no_faults:
        capture_faults(cap)

    # ------------------------------------------------------------------ metrics (after traffic)
    cap.call("frontend.metrics", "GET", FE, "/metrics", expect=200,
             about="frontend Prometheus text: dynamo_frontend_worker_active_prefill_tokens / "
                   "_active_decode_blocks (labels worker_id, dp_rank) and per-model "
                   "dynamo_frontend_model_total_kv_blocks, _kv_cache_block_size, _max_num_batched_tokens")
    cap.call("worker.metrics", "GET", f"http://127.0.0.1:{SYS_BASE}", "/metrics", expect=200,
             about="one mocker worker's own /metrics (DYN_SYSTEM_PORT): worker_id label in hex")

    # ------------------------------------------------------------------ index + README
    (cap.out / "index.json").write_text(json.dumps(cap.index, indent=2) + "\n")
    lines = [
        "# Wire-format fixtures captured from NVIDIA Dynamo 1.6.1",
        "",
        "Captured from a real Dynamo 1.6.1 stack (frontend with the KV router, mocker workers, selection",
        "service) on 127.0.0.1, started by `scripts/dynamo-local.sh`. Regenerate with:",
        "",
        "```sh",
        "scripts/capture-dynamo-fixtures.sh        # starts the stack if needed, captures, stops what it started",
        "```",
        "",
        "Every exchange `NAME` is `NAME.request.json` (the body sent, when there is one) and",
        "`NAME.response.{json,sse,txt}` (the body exactly as received, raw bytes). `index.json` has method,",
        "path, status and content type of each, plus `note` entries: facts checked during the capture.",
        "Worker ids are u64 (often above 2^53; `fixture-probe` registers 2^63+12345): parse as integers.",
        "Ids, timestamps and generated text differ between captures; shapes do not.",
        "",
        "| exchange | request | status | what it shows |",
        "|---|---|---|---|",
    ]
    for e in cap.index:
        if "note" in e:
            continue
        lines.append(f"| `{e['name']}` | {e['method']} {e['service']} `{e['path']}` | {e['status']} | {e['about']} |")
    lines += ["", "## Facts checked during the capture", ""]
    for e in cap.index:
        if "note" in e:
            lines.append(f"- `{e['name']}`: {e['note']}: `{json.dumps(e['value'])}`")
    (cap.out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"capture: {sum(1 for e in cap.index if 'note' not in e)} exchanges written to {cap.out}")


if __name__ == "__main__":
    main()
