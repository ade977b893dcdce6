"""Turning results into tables, a verdict on each target, and a plot."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import concurrency, layout, pg_throughput, tool_calls
from . import postgres as pg_peers
from .kit import noise, quick_size

DEFAULT = "default"


# -- targets ------------------------------------------------------------------------------

def _rows(results: dict[str, Any], policy: str = DEFAULT, kind: str | None = None,
          payload: int | None = None) -> list[dict[str, Any]]:
    return [r for r in results.get("granularity", [])
            if r["policy"] == policy and (kind is None or r["workload"] == kind)
            and (payload is None or r["payload"] == payload)]


def _target(name: str, limit: str, measured: float | None, ok: bool | None, detail: str
            ) -> dict[str, Any]:
    return {"target": name, "limit": limit, "measured": measured,
            "met": ok, "detail": detail}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the benchmark issue, measured: met, missed, or not measured (None)."""
    quick = bool(results.get("meta", {}).get("quick"))
    if results.get("meta", {}).get("what") == "postgres":  # only its own rows were measured
        return quick_size.mark(_postgres_targets(results), quick)
    out = []
    for b, limit in ((100, 3.0), (1000, 1.3), (10000, 1.1)):
        rows = [r for r in _rows(results, payload=b) if r["workload"] in ("linear", "fanout4")]
        worst = max(rows, key=lambda r: r["wa_committed"], default=None)
        out.append(_target(f"WA committed, default policy, B={b}", f"<= {limit}x",
                           worst["wa_committed"] if worst else None,
                           worst["wa_committed"] <= limit if worst else None,
                           _each(rows, "wa_committed", "x")))
    longs = sorted(_rows(results, kind="long"), key=lambda r: r["size"])
    if len(longs) >= 2:
        prev, last = longs[-2], longs[-1]
        ratio = last["wa_committed"] / prev["wa_committed"]
        out.append(_target("WA flat as runs get longer (default)", "WA(Kmax)/WA(Kprev) <= 1.2",
                           ratio, ratio <= 1.2, _each(longs, "wa_committed", "x", key="size")))
    rows = [r for r in _rows(results) if r["workload"] in ("linear", "fanout4")]
    worst = max(rows, key=lambda r: r["growth_vs_payload_floor"] or 0, default=None)
    out.append(_target("store growth vs raw LMDB growth for the same payloads (default)",
                       "<= 1.2x", worst["growth_vs_payload_floor"] if worst else None,
                       worst["growth_vs_payload_floor"] <= 1.2 if worst else None,
                       _each(rows, "growth_vs_payload_floor", "x")))
    worst = max(rows, key=lambda r: r["growth_vs_floor"] or 0, default=None)
    out.append(_target("store growth vs raw LMDB committing the same bytes (default)",
                       "<= 1.2x", worst["growth_vs_floor"] if worst else None,
                       worst["growth_vs_floor"] <= 1.2 if worst else None,
                       _each(rows, "growth_vs_floor", "x")))
    out.append(_vs_langgraph(results))
    worst = max(rows, key=lambda r: r["overhead_vs_floor"] or 0, default=None)
    out.append(_target("durable overhead per superstep vs raw-LMDB floor (same commits)",
                       "<= 2x", worst["overhead_vs_floor"] if worst else None,
                       worst["overhead_vs_floor"] <= 2.0 if worst else None,
                       _each(rows, "overhead_vs_floor", "x")))
    k1000 = [r for r in _rows(results, kind="long") if r["size"] >= 1000]
    out.append(_target("read latest state at K=1000 (default)", "<= 1 ms",
                       k1000[0]["read_latest_ms"] if k1000 else None,
                       k1000[0]["read_latest_ms"] <= 1.0 if k1000 else None,
                       "" if k1000 else "no K=1000 run (use the full run)"))
    out.extend(_redo_targets(results))
    out.extend(concurrency.targets(results))
    out.extend(results.get("tool_calls", {}).get("targets", []))
    out.extend(_postgres_targets(results))
    out.extend(layout.targets(results.get("layout")))
    return quick_size.mark(out, quick)


def _postgres_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [*results.get("postgres", {}).get("targets", []),
            *results.get("pg_throughput", {}).get("targets", [])]


def _each(rows: Iterable[dict[str, Any]], field: str, unit: str, key: str = "label") -> str:
    return "; ".join(f"{r[key]}: {r[field]:.2f}{unit}" for r in rows if r[field] is not None)


def _vs_langgraph(results: dict[str, Any]) -> dict[str, Any]:
    name = "durable overhead per superstep vs LangGraph+SqliteSaver sync"
    lg = {r["spec"]: r for r in results.get("peers", []) if r["variant"] == "sqlite-sync"}
    pairs = [(r, lg[r["spec"]]) for r in _rows(results)
             if r["spec"] in lg and r["workload"] in ("linear", "fanout4")]
    if not pairs:
        return _target(name, "<= 1/5", None, None, "LangGraph not measured in this run")
    ratios = [(r["label"], r["overhead_ms_per_superstep"] / max(p["overhead_ms_per_superstep"],
                                                                 1e-9)) for r, p in pairs]
    worst = max(v for _, v in ratios)
    return _target(name, "<= 0.2", worst, worst <= 0.2,
                   "; ".join(f"{label}: {v:.3f}" for label, v in ratios))


def _redo_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    redo = results.get("redo", [])
    if not redo:
        return [_target("redo after crash (default) <= one superstep's unfinished tasks",
                        "0 kills beyond", None, None, "no crash runs")]
    default = [r for r in redo if r["policy"] == DEFAULT]
    beyond = sum(r["kills_redo_beyond_one_superstep"] for r in default)
    kills = sum(r["kills"] for r in default)
    repeated = sum(r["repeated_effects"] for r in redo)
    all_kills = sum(r["kills"] for r in redo)
    return [
        _target("redo after crash (default) <= one superstep's unfinished tasks",
                "0 kills beyond", beyond, beyond == 0,
                f"{kills} kills; " + "; ".join(
                    f"{r['label']}: max {r['redo_tasks_max']} task(s) of width {r['width']}"
                    for r in default)),
        _target("repeated non-idempotent tool effects (every policy)", "0", repeated,
                repeated == 0, f"{all_kills} kills over {len(redo)} (workload, policy) cases"),
    ]


# -- tables -------------------------------------------------------------------------------

def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, noise.Overhead):
        return noise.text(v, digits)
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:.0f}"
        return f"{v:.{digits}f}"
    return str(v)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    line = lambda r: "  ".join(  # noqa: E731
        c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, cells)])


GRANULARITY_HEADERS = ["workload", "policy", "WA commit", "WA file", "file/LMDB", "commits/ss",
                       "flushes/ss", "ms/ss", "x no-persist", "ovh/floor", "read ms"]


def granularity_rows(results: dict[str, Any]) -> list[list[Any]]:
    return [[r["label"], r["policy"], r["wa_committed"], r["wa_growth"],
             r["growth_vs_payload_floor"], r["commits_per_superstep"], r["flushes_per_superstep"],
             r["ms_per_superstep"], r["overhead_ratio"], noise.overhead(r["overhead_vs_floor"]),
             r["read_latest_ms"]] for r in results.get("granularity", [])]


REDO_HEADERS = ["workload", "policy", "kills", "redo mean", "redo max", "lost done max",
                ">1 superstep", "repeated effects", "asked human", "state ok", "load ms"]


def redo_rows(results: dict[str, Any]) -> list[list[Any]]:
    return [[r["label"], r["policy"], r["kills"], r["redo_mean"], r["redo_max"],
             r["redo_finished_max"], r["kills_redo_beyond_one_superstep"],
             r["repeated_effects"], r["asked_human"], r["state_ok"], r["resume_load_ms_median"]]
            for r in results.get("redo", [])]


PEER_HEADERS = ["workload", "store", "WA commit", "WA file", "ms/ss", "overhead ms/ss",
                "read ms", "bide ovh / this"]


def peer_rows(results: dict[str, Any]) -> list[list[Any]]:
    bide = {r["spec"]: r for r in _rows(results)}
    fast = {r["spec"]: r for r in _rows(results, policy="fast")}
    out = []
    for spec in dict.fromkeys(r["spec"] for r in results.get("peers", [])):
        for label, r in (("bide default (durable)", bide.get(spec)),
                         ("bide fast", fast.get(spec))):
            if r is not None:
                out.append([r["label"], label, r["wa_committed"], r["wa_growth"],
                            r["ms_per_superstep"], noise.overhead(r["overhead_ms_per_superstep"]),
                            r["read_latest_ms"], None])
        for p in (p for p in results["peers"] if p["spec"] == spec):
            b = bide.get(spec)
            ratio = (b["overhead_ms_per_superstep"] / p["overhead_ms_per_superstep"]
                     if b and p["overhead_ms_per_superstep"] > 0 else None)
            out.append([p["label"], p["peer"], p["wa_committed"], p["wa_growth"],
                        p["ms_per_superstep"], noise.overhead(p["overhead_ms_per_superstep"]),
                        p["read_latest_ms"], noise.overhead(ratio)])
    return out


TARGET_HEADERS = ["target", "limit", "measured", "met"]


def target_rows(results: dict[str, Any]) -> list[list[Any]]:
    return [[t["target"], t["limit"],  # below zero, a measured value is an overhead's noise
             noise.overhead(t["measured"]) if (t["measured"] or 0) < 0 else t["measured"],
             quick_size.verdict(t) or ("n/a" if t["met"] is None else t["met"])]
            for t in targets(results)]


def render(results: dict[str, Any]) -> str:
    parts = []
    if results.get("granularity"):
        parts += ["Checkpoint granularity (ss = superstep; WA = bytes / logical payload bytes)",
                  "  WA commit: encoded records committed; WA file: LMDB pages used; file/LMDB: "
                  "growth / raw LMDB's growth holding only the payloads;",
                  "  x no-persist: time / the same flow in memory; ovh/floor: time over "
                  "no-persist / a bare LMDB loop committing the same bytes in the same commits;",
                  f"  {noise.NOTE}",
                  table(GRANULARITY_HEADERS, granularity_rows(results)), ""]
    if results.get("redo"):
        parts += ["Redo after SIGKILL at random moments (node executions redone per kill)",
                  "  lost done: redone tasks that had returned before the kill; >1 superstep: "
                  "kills whose redo spans more than one superstep's tasks;",
                  "  asked human: outcome-unknown tool calls left to a decision; load ms: a new "
                  "process loading the latest checkpoint + pending writes",
                  table(REDO_HEADERS, redo_rows(results)), ""]
    if results.get("peers"):
        parts += ["Side by side with LangGraph (same workloads, same machine, same run)",
                  table(PEER_HEADERS, peer_rows(results)), ""]
    parts += concurrency.section(results)
    if results.get("tool_calls"):
        parts += [tool_calls.render(results["tool_calls"]), ""]
    if results.get("postgres"):
        parts += [pg_peers.render(results["postgres"]), ""]
    if results.get("pg_throughput"):
        parts += [pg_throughput.render(results["pg_throughput"]), ""]
    for key in ("peers_skipped", "postgres_skipped"):
        skipped = results.get("meta", {}).get(key)
        if skipped:
            parts += [skipped, ""]
    if results.get("layout"):
        parts += [layout.render(results["layout"]), ""]
    parts += ["Targets", table(TARGET_HEADERS, target_rows(results))]
    return "\n".join(parts)


# -- plot ---------------------------------------------------------------------------------

def plot(results: dict[str, Any], path: str) -> None:
    """Write amplification and redo against granularity, cost against run length: one PNG.

    Raises:
        ImportError: matplotlib is not installed (the ``plot`` extra).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    _plot_wa(axes[0][0], results)
    _plot_redo(axes[0][1], results)
    _plot_length(axes[1][0], results)
    _plot_time(axes[1][1], results)
    meta = results.get("meta", {})
    fig.suptitle(f"bide bench {meta.get('what', '')}{' --quick' if meta.get('quick') else ''} "
                 f"({meta.get('cpus', '?')} cpus, py-lmdb {meta.get('py_lmdb', '?')})")
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)


def _policies(results: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(r["policy"] for r in results.get("granularity", [])))


def _plot_wa(ax: Any, results: dict[str, Any]) -> None:
    policies = _policies(results)
    x = range(len(policies))
    specs = [r["spec"] for r in results.get("granularity", [])
             if r["policy"] == DEFAULT and r["workload"] in ("linear", "fanout4")]
    for spec in specs:
        rows = {r["policy"]: r for r in results["granularity"] if r["spec"] == spec}
        ax.plot(x, [rows[p]["wa_committed"] for p in policies], marker="o",
                label=rows[DEFAULT]["label"])
    lg = [r for r in results.get("peers", []) if r["workload"] == "linear"
          and r["variant"] in ("sqlite-sync", "delta-sync")]
    for r in lg:
        ax.axhline(r["wa_committed"], ls=":", lw=1, color="grey")
        ax.annotate(f"LG {r['variant']} {r['label'].split(' ', 1)[1]}", (len(policies) - 1,
                    r["wa_committed"]), fontsize=6, ha="right", va="bottom", color="grey")
    ax.set_yscale("log")
    ax.set_xticks(list(x), policies, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("bytes committed / logical bytes")
    ax.set_title("write amplification by policy")
    ax.legend(fontsize=6, ncol=2)


def _plot_redo(ax: Any, results: dict[str, Any]) -> None:
    redo = results.get("redo", [])
    if not redo:
        ax.set_title("redo after crash: not measured")
        return
    policies = list(dict.fromkeys(r["policy"] for r in redo))
    specs = list(dict.fromkeys(r["label"] for r in redo))
    width = 0.8 / len(specs)
    for i, label in enumerate(specs):
        rows = {r["policy"]: r for r in redo if r["label"] == label}
        xs = [j + i * width for j in range(len(policies))]
        ax.bar(xs, [rows[p]["redo_mean"] for p in policies], width, label=f"{label} mean")
        ax.scatter(xs, [rows[p]["redo_max"] for p in policies], marker="_", s=80, color="k")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(policies))], policies, rotation=30,
                  ha="right", fontsize=8)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylabel("node executions redone per kill (bar mean, tick max)")
    ax.set_title(f"redo after SIGKILL ({redo[0]['kills']} kills per bar)")
    ax.legend(fontsize=6)


def _plot_length(ax: Any, results: dict[str, Any]) -> None:
    longs = [r for r in results.get("granularity", []) if r["workload"] == "long"]
    for p in _policies(results):
        rows = sorted((r for r in longs if r["policy"] == p), key=lambda r: r["size"])
        if rows:
            ax.plot([r["size"] for r in rows], [r["wa_committed"] for r in rows], marker="o",
                    label=p)
    for variant in ("sqlite-sync", "delta-sync"):
        rows = sorted((r for r in results.get("peers", []) if r["workload"] == "long"
                       and r["variant"] == variant), key=lambda r: r["supersteps"])
        if rows:
            ax.plot([r["supersteps"] for r in rows], [r["wa_committed"] for r in rows], ls="--",
                    marker="x", label=f"LangGraph {variant}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("run length K (supersteps), B=100")
    ax.set_ylabel("bytes committed / logical bytes")
    ax.set_title("cost against run length")
    ax.legend(fontsize=6, ncol=2)


def _plot_time(ax: Any, results: dict[str, Any]) -> None:
    policies = _policies(results)
    specs = [r["spec"] for r in results.get("granularity", [])
             if r["policy"] == DEFAULT and r["workload"] in ("linear", "fanout4")
             and r["payload"] == 1000]
    for spec in specs:
        rows = {r["policy"]: r for r in results["granularity"] if r["spec"] == spec}
        ax.plot(range(len(policies)), [rows[p]["overhead_ms_per_superstep"] for p in policies],
                marker="o", label=f"bide {rows[DEFAULT]['label']}")
        for r in results.get("peers", []):
            if r["spec"] == spec and r["variant"] == "sqlite-sync":
                ax.axhline(r["overhead_ms_per_superstep"], ls=":", color="grey", lw=1)
                ax.annotate(f"LG sqlite-sync {r['workload']}", (0, r["overhead_ms_per_superstep"]),
                            fontsize=6, va="bottom", color="grey")
    ax.set_xticks(range(len(policies)), policies, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per superstep over no persistence")
    ax.set_title("time overhead by policy (B=1000)")
    ax.legend(fontsize=6)
