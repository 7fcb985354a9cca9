#!/usr/bin/env python3
"""The same Q grid (and a load condition) against a local Dynamo mocker stack and sy-sim.

Prints per cell the median server TTFT (nvext.timing.ttft_ms) of both and their ratio, the load
condition's, and how many advisory /select picks agree (workers matched by position in the table).

usage: mocker_twin.py REAL_FRONTEND REAL_SELECT REAL_WORKERS_JSON SIM_FRONTEND SIM_SELECT SIM_WORKERS [REPEATS]
  REAL_WORKERS_JSON: $RUN_DIR/workers.json of scripts/dynamo-local.sh
  SIM_WORKERS: the "workers" object `sy-sim serve` prints, as JSON text
The stack and the simulator must have the same worker table (docs/benchmarks.md gives the one used).
"""
import json, sys, time, random, statistics, urllib.request, threading

def post(url, body, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())

def complete(fe, model, toks, wid, max_tokens):
    b = {"model": model, "prompt": toks, "max_tokens": max_tokens,
         "nvext": {"backend_instance_id": wid, "extra_fields": ["timing"]}}
    a = post(fe + "/v1/completions", b)
    return a["nvext"]["timing"]["ttft_ms"], a["usage"]["prompt_tokens_details"]["cached_tokens"]

def select(sel, model, toks):
    a = post(sel + "/select", {"model_name": model, "token_ids": toks, "advisory": True})
    return a.get("worker_id") or a.get("instance_id")

def run(fe, sel, workers, seed, repeats, ns, fs, bs):
    rng = random.Random(seed)
    ttft, picks = {}, []
    for rep in range(repeats):
        for model in ("efficient", "capable"):
            for wi, wid in enumerate(workers[model]):
                for n in ns:
                    for f in fs:
                        k = int(n * f) // bs * bs
                        toks = [rng.randrange(1000, 2000) for _ in range(n)]
                        if k:
                            complete(fe, model, toks[:k], wid, 1)
                            time.sleep(0.05)
                        t, c = complete(fe, model, toks, wid, 2)
                        ttft.setdefault((model, wi, n, f), []).append(t)
                        time.sleep(0.15)
                        p = select(sel, model, toks)
                        picks.append((model, workers[model].index(p) if p in workers[model] else -1))
    # load: 8 background requests of 256 tokens generating 64 on worker 0 of each model, then a probe
    load = {}
    for rep in range(repeats):
        for model in ("efficient", "capable"):
            wid = workers[model][0]
            ths = []
            for _ in range(8):
                bg = [rng.randrange(1000, 2000) for _ in range(256)]
                th = threading.Thread(target=complete, args=(fe, model, bg, wid, 64))
                th.start(); ths.append(th)
            time.sleep(0.03)
            toks = [rng.randrange(1000, 2000) for _ in range(512)]
            t, _ = complete(fe, model, toks, wid, 2)
            load.setdefault(model, []).append(t)
            for th in ths: th.join()
            time.sleep(0.2)
    return ttft, picks, load

def main():
    rf, rs, rw, sf, ss, sw = sys.argv[1:7]
    repeats = int(sys.argv[7]) if len(sys.argv) > 7 else 5
    rws = json.load(open(rw))
    real_workers = {m: [w["worker_id"] for w in rws if w["model"] == m] for m in ("efficient", "capable")}
    sim_workers = json.loads(sw)
    ns, fs, bs = [128, 512, 1536], [0.0, 0.5, 0.875], 32
    r = run(rf, rs, real_workers, 7, repeats, ns, fs, bs)
    s = run(sf, ss, sim_workers, 7, repeats, ns, fs, bs)
    print("cell  real_ms  sim_ms  ratio")
    ratios = []
    for key in sorted(r[0]):
        a, b = statistics.median(r[0][key]), statistics.median(s[0][key])
        ratios.append(b / a)
        print(key, f"{a:.2f} {b:.2f} {b/a:.3f}")
    print(f"cell ratio range {min(ratios):.3f}-{max(ratios):.3f}, mean |1-ratio| {statistics.mean(abs(1-x) for x in ratios):.3f}")
    for m in r[2]:
        a, b = statistics.median(r[2][m]), statistics.median(s[2][m])
        print("load", m, f"{a:.2f} {b:.2f} {b/a:.3f}")
    same = sum(1 for x, y in zip(r[1], s[1]) if x == y)
    print(f"advisory picks equal: {same}/{len(r[1])}")

main()
