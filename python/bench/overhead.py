#!/usr/bin/env python3
"""What instrumenting from Python costs (issue 5: "a stage scope from Python costs at most 5 us; an
instrumented 1-ms step loop runs within 1% of the bare loop").

1. Scope cost: a `with` block around nothing, per form (a stage made once and entered each time, a
   stage made each time, a decorated function, the module-level itera.stage, with a stream, with
   stream="current", with memory=True), minus the empty loop's own cost; the median of several rounds.
   The verdict is on the stage made each time (`with s.stage("x"):`), the form most code uses.
2. Step loop: the same loop of 1-ms steps bare and instrumented (an iteration around each step, three
   stages inside, three counts; in torch mode every scope on the current stream), in alternating
   rounds so that drifts of the machine hit both alike; the overhead is the ratio of the median round
   times, minus one. The session is opened for each instrumented round and closed after it, outside
   the timing, so the bare rounds run with no session open: with --device-clock cupti (or auto, where
   CUPTI is usable) CUPTI's activity collection, which makes every CUDA call of the process dearer
   while a session is open, is off during them (as tests/user/bench_user_overhead.cpp does).

    --device-clock auto|cupti|events   how scopes given a stream take device time (Session(device_clock=)):
                   "events" puts two CUDA events per scope on the stream, "cupti" nothing; "auto" is
                   cupti where this process can use CUPTI, else events. The tables name the clock used.

    --mode host    a step is 1 ms of host work (a spin on perf_counter_ns); needs nothing but itera
    --mode torch   a step is a chain of matrix products sized to about 1 ms on the GPU. Three loops:
                   steps ending in a synchronisation with every scope on the stream (the verdict's:
                   8 CUDA events a step, nothing hides the host's cost), the same with only the
                   iteration and the compute stage on the stream, and steps left queued on the
                   stream (one synchronisation a round), as an asynchronous training loop runs

Prints markdown tables (and writes them to --out); exits 1 when a limit is exceeded.
"""

import argparse
import json
import statistics
import sys
import time

import itera


def spin_us(us):
    end = time.perf_counter_ns() + int(us * 1e3)
    while time.perf_counter_ns() < end:
        pass


class Rounds:
    """A fresh case per timed round (cases must differ by their axes), ended outside the timing."""

    def __init__(self, session, part):
        self.session, self.part, self.n, self.open = session, part, 0, False

    def next(self):
        self.close()
        self.session.begin_case({"part": self.part, "round": self.n})
        self.n += 1
        self.open = True

    def close(self):
        if self.open:
            self.session.end_case()
            self.open = False


def per_op_us(body, n, rounds, cases=None):
    """Median over rounds of (time of n calls of body) / n, in microseconds."""
    times = []
    for _ in range(rounds):
        if cases:
            cases.next()
        t0 = time.perf_counter_ns()
        body(n)
        times.append((time.perf_counter_ns() - t0) / n / 1e3)
    if cases:
        cases.close()
    return statistics.median(times)


def scope_costs(session, n, rounds, stream, torch_session, device_clock):
    """[(form, us per scope)], the empty loop's cost taken off."""
    def empty(k):
        for _ in range(k):
            pass

    cases = Rounds(session, "scopes")

    def with_stage_once(k, st=session.stage("x", stream)):
        for _ in range(k):
            with st:
                pass

    def with_stage_each(k, s=session, stream=stream):
        for _ in range(k):
            with s.stage("x", stream):
                pass

    @session.stage("f", stream)
    def decorated():
        pass

    def plain():
        pass

    def call_decorated(k):
        for _ in range(k):
            decorated()

    def call_plain(k):
        for _ in range(k):
            plain()

    def module_stage(k):
        with itera.Session("python_overhead_module", device=session.device if session.device >= 0 else "none",
                           device_clock=device_clock) as s:
            t0 = time.perf_counter_ns()
            for _ in range(k):
                with itera.stage("x", stream):
                    pass
            elapsed = time.perf_counter_ns() - t0
        return elapsed

    def module_stage_us(k, rounds):
        return statistics.median(module_stage(k) / k / 1e3 for _ in range(rounds))

    cases.next()
    with_stage_each(100)
    cases.close()
    base = per_op_us(empty, n, rounds)
    base_call = per_op_us(call_plain, n, rounds)
    forms = [
        ("stage made each time: with s.stage(name)", with_stage_each, base),
        ("stage made once, entered each time: with st", with_stage_once, base),
        ("decorated function: @s.stage(name), minus the call", call_decorated, base_call),
    ]
    out = [(name, per_op_us(body, n, rounds, cases) - minus) for name, body, minus in forms]
    # itera.stage finds the current session (the innermost `with Session`) when entered.
    out.append(("module-level: with itera.stage(name)", module_stage_us(n, rounds) - base))
    if torch_session is not None:
        def current_each(k, s=session):
            for _ in range(k):
                with s.stage("x", "current"):
                    pass

        def memory_each(k, s=torch_session):
            for _ in range(k):
                with s.stage("x", "current", memory=True):
                    pass

        out.append(("stream='current' (PyTorch's current stream, read when entered)",
                    per_op_us(current_each, n, rounds, cases) - base))
        m = max(n // 50, 200)
        out.append(("memory=True (PyTorch allocator peak, driver and RSS marks)",
                    per_op_us(memory_each, m, rounds, Rounds(torch_session, "memory")) - base))
    return out


def step_loop(open_session, variant, step, steps, rounds, streams, end_round=None):
    """(bare ms/step, instrumented ms/step, overhead, device clock), medians over rounds, rounds
    alternating, one warm-up round of each first. open_session() opens a session for each
    instrumented round (outside the timing): the bare rounds run with none open. streams: the stream of
    the iteration and of the stages prepare, compute and finish."""
    clock = ["host clock"]
    counter = [0]

    def bare():
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            step()
        if end_round:
            end_round()
        return (time.perf_counter_ns() - t0) / steps / 1e6

    def instrumented():
        with open_session() as session:
            it = session.iteration(streams[0])
            prepare, compute, finish = (session.stage(n, st)
                                        for n, st in zip(("prepare", "compute", "finish"), streams[1:]))
            session.begin_case({"part": variant, "round": counter[0]})
            counter[0] += 1
            t0 = time.perf_counter_ns()
            for _ in range(steps):
                with it:
                    with prepare:
                        session.count("items", 1)
                    with compute:
                        step()
                        session.count("flops", 1e9)
                    with finish:
                        session.count("bytes_written", 4096)
            if end_round:
                end_round()
            ms = (time.perf_counter_ns() - t0) / steps / 1e6
            record = session.end_case()  # reads the device times: outside the timing
        if record["status"] != "ok" or len(record["samples"]["host_ns"]) != steps:
            raise SystemExit(f"instrumented round of {variant}: status {record['status']}, "
                             f"{len(record['samples']['host_ns'])} samples: {record['message']}")
        if streams[0] is not None:
            clock[0] = record["device_time_method"]
        return ms

    bare()  # warm both paths: allocator, page faults, CUPTI's first activation, clocks
    instrumented()
    bare_ms, inst_ms = [], []
    for r in range(rounds):
        order = (bare, instrumented) if r % 2 == 0 else (instrumented, bare)
        for fn in order:
            (bare_ms if fn is bare else inst_ms).append(fn())
    b, i = statistics.median(bare_ms), statistics.median(inst_ms)
    return b, i, i / b - 1, clock[0]


def torch_steps(step_us):
    """A ~step_us chain of matrix products on the current stream: (the step ending in a
    synchronisation, the step left queued, the synchronisation, what it is)."""
    import torch
    x = torch.randn(1024, 1024, device="cuda")
    y = torch.empty_like(x)

    def chain(k):
        for _ in range(k):
            torch.mm(x, x, out=y)

    chain(10)
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    chain(200)
    torch.cuda.synchronize()
    per_mm_us = (time.perf_counter_ns() - t0) / 200 / 1e3
    k = max(1, round(step_us / per_mm_us))

    def queued():
        chain(k)

    def synced():
        chain(k)
        torch.cuda.synchronize()

    for _ in range(20):
        synced()
    t0 = time.perf_counter_ns()
    for _ in range(50):
        synced()
    measured = (time.perf_counter_ns() - t0) / 50 / 1e3
    return synced, queued, torch.cuda.synchronize, f"{k} x mm 1024^3 fp32 ({measured:.0f} us measured)"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("host", "torch"), default="host")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--step-us", type=float, default=1000.0)
    p.add_argument("--scopes", type=int, default=20000, help="scopes per round of the scope-cost part")
    p.add_argument("--device-clock", choices=("auto", "cupti", "events"), default="auto",
                   help="how scopes given a stream take device time (torch mode): Session(device_clock=...)")
    p.add_argument("--max-overhead", type=float, default=0.01)
    p.add_argument("--max-scope-us", type=float, default=5.0)
    p.add_argument("--out", help="write the tables here too (markdown)")
    p.add_argument("--json", help="write the numbers here (JSON)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.rounds < 1 or a.scopes < 1 or a.step_us <= 0:
        p.error("--steps, --rounds, --scopes and --step-us must be positive")

    if a.mode == "torch":
        try:
            import torch
        except ImportError:
            print("SKIPPED: --mode torch needs PyTorch", file=sys.stderr)
            return 77
        if not torch.cuda.is_available():
            print("SKIPPED: --mode torch needs a CUDA device PyTorch can use", file=sys.stderr)
            return 77
        def open_session(name="python_overhead", torch_memory=False):
            return itera.Session(name, device=0, torch_memory=torch_memory, device_clock=a.device_clock)

        # PyTorch's current stream, outside any torch.cuda.stream block: the default stream, handle 0,
        # which the package passes as cudaStreamLegacy (itera/_streams.py). An int: resolved at no cost.
        resolved = torch.cuda.current_stream().cuda_stream
        synced, queued, sync, what = torch_steps(a.step_us)
        all_on = (resolved,) * 4
        gpu_on = (resolved, None, resolved, None)
        # The first is the verdict's: every scope on the stream, each step ending in a synchronisation (a
        # request answered, a loss read), so nothing hides the host's cost.
        variants = [
            ("torch, synchronised steps", f"{what}, then synchronize", "4, all on the stream", synced, all_on, None),
            ("torch, synchronised steps", f"{what}, then synchronize", "4, iteration and compute on the stream",
             synced, gpu_on, None),
            ("torch, queued steps", f"{what}, one synchronize a round", "4, all on the stream", queued, all_on, sync),
        ]
    else:
        def open_session(name="python_overhead", torch_memory=False):
            return itera.Session(name, device="none", torch_memory=torch_memory, device_clock=a.device_clock)

        resolved = None
        variants = [("host", f"{a.step_us:.0f} us host spin", "4", lambda: spin_us(a.step_us), (None,) * 4, None)]

    try:
        probe = open_session()  # a clock this process cannot use (cupti under another profiler), said once
    except itera.Error as e:
        print(f"--device-clock {a.device_clock}: {e}", file=sys.stderr)
        return 2
    backend = probe.backend
    probe.close()

    with open_session() as session:
        torch_session = open_session("python_overhead_memory", True) if a.mode == "torch" else None
        try:
            costs = scope_costs(session, a.scopes, max(a.rounds, 5), resolved, torch_session, a.device_clock)
        finally:
            if torch_session is not None:
                torch_session.close()
    loops = []
    for i, (name, what, scopes, step, streams, end_round) in enumerate(variants):
        bare, inst, over, clock = step_loop(open_session, f"steps{i}", step, a.steps, a.rounds, streams, end_round)
        loops.append((name, what, f"{scopes} ({clock})", bare, inst, over))

    scope_us = costs[0][1]
    scope_ok = scope_us <= a.max_scope_us
    overhead = loops[0][5]
    loop_ok = overhead <= a.max_overhead
    lines = [
        f"itera {itera.__version__} (commit {itera.build_info['git_commit'][:12]}), Python "
        f"{sys.version.split()[0]}, mode {a.mode}, backend {backend}, device clock option {a.device_clock}",
        "",
        f"| scope form ({'stream: the current one' if a.mode == 'torch' else 'no stream'}) | us per scope |",
        "| --- | ---: |",
    ]
    lines += [f"| {name} | {us:.2f} |" for name, us in costs]
    lines += [
        "",
        "| mode | step | steps x rounds | scopes/step | bare ms/step | instrumented ms/step | overhead | limit | "
        "scope cost | limit | verdict |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for i, (name, what, scopes, bare, inst, over) in enumerate(loops):
        verdict = ("PASS" if scope_ok and loop_ok else "FAIL") if i == 0 else \
            ("within" if over <= a.max_overhead else "above") + " the limit (for comparison)"
        lines.append(f"| {name} | {what} | {a.steps} x {a.rounds} | {scopes} | {bare:.4f} | {inst:.4f} | "
                     f"{over * 100:+.3f}% | {a.max_overhead * 100:.2f}% | {scope_us:.2f} us | {a.max_scope_us:.1f} us | "
                     f"{verdict} |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"mode": a.mode, "device_clock": a.device_clock, "steps": a.steps, "rounds": a.rounds,
                       "scope_us": dict(costs),
                       "loops": [dict(zip(("variant", "step", "scopes", "bare_ms_per_step", "instrumented_ms_per_step",
                                           "overhead"), row)) for row in loops],
                       "max_overhead": a.max_overhead, "max_scope_us": a.max_scope_us,
                       "pass": scope_ok and loop_ok, "itera": itera.build_info}, f, indent=1)
    return 0 if scope_ok and loop_ok else 1


if __name__ == "__main__":
    sys.exit(main())
