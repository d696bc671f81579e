"""ftrt.analysis.project (goodput at scale): the closed form against the discrete-event simulation of
the same model, the Young/Daly interval against the simulated waste, Daly's published
figures, the failure-rate conversions, and the command line on a report. No libftrt, no MPI:
also run alone by ctest unit.project."""
import json
import math
import os
import sys

import pytest

sys.dont_write_bytecode = True
REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bindings", "python"))
from ftrt.analysis import project as P  # noqa: E402

pytest.importorskip("numpy")
pytest.importorskip("matplotlib")


def model(lam, C, pi_rb, ip_detect, ip_busy, ip_reset, rb_detect, rb_busy):
    return {"lam": lam, "C": C, "pi_rb": pi_rb, "ip_detect": ip_detect, "ip_busy": ip_busy,
            "ip_reset": ip_reset, "rb_detect": rb_detect, "rb_busy": rb_busy}


# Parameter sets with a large waste (a check on a job that loses nothing would pass anyway).
# Times in s, lam in 1/s.
CASES = {
    # plain checkpoint-restart, 131k GPUs at Meta RSC-1's rate: MTBF 13.5 min
    "plain-131k": model(1 / 811.0, 32.8, 1.0, [(1, 0)], 0, 0, [(0.8, 30), (0.2, 600)], 213),
    # plain, restart cost of the order of the MTBF, no hangs
    "plain-slow-restart": model(1 / 600.0, 20.0, 1.0, [(1, 0)], 0, 0, [(1, 60)], 500),
    # in-place recoveries, 30 % of them rollbacks (spares out), costly recovery
    "inplace-mixed": model(1 / 300.0, 5.0, 0.3, [(0.5, 2), (0.5, 40)], 60, 0,
                           [(0.5, 2), (0.5, 40)], 200),
    # in-place recovery that reloads the last checkpoint (sharded state)
    "inplace-sharded": model(1 / 400.0, 10.0, 0.05, [(1, 5)], 30, 1, [(1, 5)], 300),
    # every failure in place, recovery about as long as a tenth of the MTBF
    "inplace-only": model(1 / 100.0, 1.0, 0.0, [(0.7, 0.01), (0.3, 1.0)], 10, 0,
                          [(1, 1)], 100),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_des_matches_closed_form(name):
    m = CASES[name]
    tau, _ = P.optimal_interval(m)
    if not math.isfinite(tau):
        tau = 50.0
    for t in (tau, 2 * tau):
        cf, _ = P.closed_form(m, t)
        assert 0.05 < cf < 0.97, (name, cf)     # a case that loses something
        des, fails = P.simulate(m, t, 20000 / m["lam"] * cf, seed=7)
        assert fails > 15000
        assert abs(des / cf - 1) < 0.02, (name, t, des, cf)


def test_daly_interval_minimises_simulated_waste():
    m = CASES["plain-slow-restart"]
    tau, _ = P.optimal_interval(m)
    cf, _ = P.closed_form(m, tau)
    work = 30000 / m["lam"] * cf
    waste = {}
    for f in (0.5, 1.0, 2.0):
        e, _ = P.simulate(m, f * tau, work, seed=3)
        waste[f] = 1 - e
    assert waste[1.0] < waste[0.5] and waste[1.0] < waste[2.0], waste
    # and the closed form's own minimum is Daly's interval (within 2 %)
    grid = [tau * (0.5 + i / 1000.0) for i in range(1501)]
    best = max(grid, key=lambda t: P.closed_form(m, t)[0])
    assert abs(best / tau - 1) < 0.02, (best, tau)


def test_daly_published_examples():
    # Daly 2006, figures 3-5: M = 24 h, 6 h, 15 min with a 5-minute dump: 117, 57, 9.1 min
    for m_min, want in ((1440, 117), (360, 57), (15, 9.1)):
        got = P.daly_interval(5.0, m_min)
        assert abs(got - want) / want < 0.01, (m_min, got, want)
    assert P.young_interval(5.0, 1440) == pytest.approx(120.0)
    assert P.daly_interval(10.0, 4.0) == 4.0          # C >= 2M: checkpoint every M


def test_failure_rates():
    a = P.build_parser().parse_args(["x.json"])
    rates = {n: r for n, r, _ in P.rate_list(a)}
    assert rates["meta-rsc1"] == 6.50 and rates["meta-rsc2"] == 2.34
    # Llama 3: 419 interruptions in 54 days on 16,384 GPUs -> one every 54*24/419 h
    inp = P.Inputs()
    for k, v in {"gpus_per_node": 8, "hang_share": 0.2, "relaunch_s": 60, "reinit_s": 120,
                 "reload_s": 30, "plain_crash_detect_s": 30, "plain_hang_timeout_s": 600,
                 "plain_ckpt_write_s": 30, "spare_nodes_per_128": 1, "spare_refill_h": 4,
                 "mttd_crash_s": 0.002, "ftrt_hang_detect_s": 1, "mttr_s": 0.01,
                 "ftrt_rework_s": 0.01, "ftrt_ckpt_stall_s": 0.002,
                 "ftrt_state": "replicated", "ftrt_persist_s": 30}.items():
        inp.set(k, v, "test")
    _, _, facts = P.models(inp, 16384, rates["llama3"])
    assert facts["job_mtbf_h"] == pytest.approx(54 * 24 / 419.0)
    _, _, facts = P.models(inp, 16384, 6.50)       # 2,048 nodes at 6.5 per 1,000 node-days
    assert facts["job_mtbf_h"] == pytest.approx(24 / (2048 * 6.5e-3))
    assert P.poisson_sf(1, 0.5) == pytest.approx(1 - math.exp(-0.5))


def report(failures=True):
    f = [{"kind": "connection_lost", "mttd_s": 0.002, "mttr_s": 0.009, "recovered": True,
          "rework_steps": 0}]
    return {"schema": 1, "status": "finished", "steps": 300, "wall_s": 3.8, "trainers": 4,
            "spares": 1, "kept_step_rank_s": 13.3, "rework_rank_s": 0.0,
            "lost_partial_step_rank_s": 0.044, "goodput": 0.7,
            "failures": f if failures else [], "advice": {"checkpoint_cost_s": 0.0016}}


def test_cli(tmp_path, capsys):
    rep = tmp_path / "report.json"
    rep.write_text(json.dumps(report()))
    out, png = tmp_path / "p.json", tmp_path / "p.png"
    assert P.main([str(rep), "--json", str(out), "--plot", str(png), "--des-failures", "2000"]) == 0
    text = capsys.readouterr().out
    for word in ("inputs:", "mttr_s", "measured", "assumed", "131072", "Daly", "simulation"):
        assert word in text
    doc = json.loads(out.read_text())
    assert len(doc["results"]) == 9
    assert doc["inputs"]["mttr_s"]["value"] == 0.009
    big = [r for r in doc["results"] if r["gpus"] == 131072]
    assert all(r["ftrt"]["ettr"] > r["plain"]["ettr"] for r in big)
    # plain's ETTR falls with the job's size
    rsc1 = [r["plain"]["ettr"] for r in doc["results"] if r["rate_source"] == "meta-rsc1"]
    assert rsc1 == sorted(rsc1, reverse=True)
    assert 0 < png.stat().st_size < 100_000


def test_cli_needs_measured_costs(tmp_path, capsys):
    rep = tmp_path / "report.json"
    rep.write_text(json.dumps(report(failures=False)))
    assert P.main([str(rep), "--no-des"]) == 1
    assert "--mttd-crash-s" in capsys.readouterr().err
    assert P.main([str(rep), "--no-des", "--mttd-crash-s", "0.003", "--mttr-s", "0.02"]) == 0


def test_committed_plot_is_small():
    png = os.path.join(REPO, "docs", "goodput-at-scale.png")
    assert os.path.exists(png) and os.path.getsize(png) < 100_000


def test_cli_scale(tmp_path, capsys):
    """--scale: MTTD and the control plane's part of MTTR from bench/coord_load's output (the
    RESULT line with the most ranks), the report's MTTR for the rest; flags still win."""
    rep = tmp_path / "report.json"
    rep.write_text(json.dumps(report()))
    res = tmp_path / "coord_load.txt"
    res.write_text("steady 10.0 s: ...\n"
                   "RESULT n=1024 per_host=8 mttd_p50_ms=0.9 fanout_p50_ms=10 plan_last_ms=6\n"
                   "  RESULT n=16384 per_host=8 mttd_p50_ms=2.5 fanout_p50_ms=150.0 "
                   "plan_last_ms=170.0 silent_p50_ms=nan\n")
    out = tmp_path / "p.json"
    assert P.main([str(rep), "--scale", str(res), "--no-des", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "16384 simulated ranks" in text
    doc = json.loads(out.read_text())
    assert doc["inputs"]["mttd_crash_s"]["value"] == pytest.approx(0.0025)
    assert doc["inputs"]["mttr_s"]["value"] == pytest.approx(0.009 + 0.150 + 0.170)
    assert "coord_load" in doc["inputs"]["mttr_s"]["source"]
    assert P.main([str(rep), "--scale", str(res), "--no-des", "--json", str(out),
                   "--mttr-s", "0.5"]) == 0
    assert json.loads(out.read_text())["inputs"]["mttr_s"]["value"] == 0.5
    res.write_text("no result here\n")
    assert P.main([str(rep), "--scale", str(res), "--no-des"]) == 1
    assert "no RESULT line" in capsys.readouterr().err


def test_deficit_against_a_plain_sum():
    """deficit(): P(D >= 1) is P(X > spares); E[D] the sum of (k - spares) P(X = k)."""
    mu, spares = 3.7, 2
    pmf = [math.exp(-mu) * mu ** k / math.factorial(k) for k in range(80)]
    p_any, e_d = P.deficit(spares, mu, 10 ** 6)
    assert p_any == pytest.approx(sum(pmf[spares + 1:]), rel=1e-9)
    assert e_d == pytest.approx(sum((k - spares) * q for k, q in enumerate(pmf) if k > spares),
                                rel=1e-9)
    assert P.deficit(spares, mu, 1)[1] == pytest.approx(sum(pmf[spares + 1:]), rel=1e-9)


def test_no_spare_policies(tmp_path, capsys):
    """With few spares and a long repair, shrink keeps more ETTR than stop (a restart per
    failure with no spare) while fold, with a node almost always missing at this size, runs at
    about half the throughput: worse than stop; a join sooner than the repair brings every
    policy closer to the job with spares; fold never does worse than half the throughput."""
    rep = tmp_path / "report.json"
    rep.write_text(json.dumps(report()))
    out = tmp_path / "p.json"
    args = [str(rep), "--no-des", "--json", str(out), "--spare-refill-h", "48",
            "--rates", "meta-rsc1", "--sizes", "131072"]
    assert P.main(args) == 0
    assert "no spare node left" in capsys.readouterr().out
    rows = json.loads(out.read_text())["results"]
    for r in rows:
        ns = r["no_spare"]
        assert ns["shrink"]["ettr"] > r["ftrt"]["ettr"] > ns["fold"]["ettr"]
        assert 0.5 <= ns["fold"]["throughput"] < 0.51 and 0.99 < ns["shrink"]["throughput"] < 1
    assert P.main(args[:-2] + ["--sizes", "131072", "--join-h", "0.5"]) == 0
    joined = json.loads(out.read_text())["results"]
    for r, j in zip(rows, joined):
        assert j["ftrt"]["ettr"] >= r["ftrt"]["ettr"]
        assert j["no_spare"]["fold"]["throughput"] >= r["no_spare"]["fold"]["throughput"]
