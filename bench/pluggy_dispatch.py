"""pluggy dispatching one hook to IMPLS no-op implementations (default 8): the reference the
Rust dispatch benchmark is compared with. Prints nanoseconds per dispatch (median of several
batches).

Usage: python3 bench/pluggy_dispatch.py [N] [IMPLS]"""
import statistics
import sys
import time

import pluggy

hookspec = pluggy.HookspecMarker("wt")
hookimpl = pluggy.HookimplMarker("wt")


class Spec:
    @hookspec
    def on_run_end(self, ctx):
        pass


def make_plugin():
    class Plugin:
        @hookimpl
        def on_run_end(self, ctx):
            return None

    return Plugin()


pm = pluggy.PluginManager("wt")
pm.add_hookspecs(Spec)
impls = int(sys.argv[2]) if len(sys.argv) > 2 else 8
for _ in range(impls):
    pm.register(make_plugin())

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
call = pm.hook.on_run_end
ctx = object()
for _ in range(n // 10):
    call(ctx=ctx)
batches = []
for _ in range(7):
    t = time.perf_counter_ns()
    for _ in range(n):
        call(ctx=ctx)
    batches.append((time.perf_counter_ns() - t) / n)
print(f"{statistics.median(batches):.1f}")
