"""The report's statistics against known distributions and known autocorrelation: interval coverage, blocks in
time, pairing, repeats, calibrated widening, the sample rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.coverage import ar1  # lognormal latencies exp(z / 2), z AR(1): mean exp(1/8), median 1
from llmload.core.stats import (CALIBRATED, CONFIDENCE, WINDOW_VALUES, WITHIN_RUN, Interval, Statistic,
                                block_counts, block_length, block_ratio_interval, combined_spread, expanded_alpha,
                                has_enough, interval, intervals, min_samples, order_interval, ratio_interval,
                                repeat_interval, repeat_ratio_interval, resample_counts, t_quantile,
                                weighted_quantiles, widened,
                                windowed_quantile)

pytestmark = pytest.mark.unit

DRAWS = 200  # repeated experiments per coverage check: a coverage's standard error is about 1.5 points
RESAMPLES = 500  # per interval in these checks (the reports use 2000): a few seconds per test


def coverage(hits: int, draws: int = DRAWS) -> float:
    return hits / draws


def test_min_sample_rule():
    assert {s: min_samples(s) for s in ("mean", "p50", "p90", "p95", "p99", "rate")} == \
        {"mean": 10, "p50": 6, "p90": 36, "p95": 72, "p99": 368, "rate": 10}
    assert min_samples("max") is None and not has_enough("max", 10 ** 6)
    # what it means: with n values, all fall below the true p99 with probability at most 2.5 %
    assert 0.99 ** min_samples("p99") <= 0.025 < 0.99 ** (min_samples("p99") - 1)
    values = np.random.default_rng(0).exponential(size=368)
    assert interval(Statistic("p99", values[:367])) == Interval(None, n=367)
    assert interval(Statistic("p99", values)).has_interval
    assert order_interval(values[:367], 0.99) == (None, None)


def test_order_statistic_interval_ranks():
    """n = 6 for the median: the sample's extremes, each missing it with probability 1/64."""
    values = np.array([5.0, 1.0, 4.0, 2.0, 6.0, 3.0])
    assert order_interval(values, 0.5) == (1.0, 6.0)
    # n = 20, median: ranks 6 and 15 (P(K < 6) = 2.07 %, P(K >= 15) = 2.07 %)
    assert order_interval(np.arange(1.0, 21.0), 0.5) == (6.0, 15.0)


def test_weighted_quantiles_equal_numpy_on_the_expanded_sample():
    rng = np.random.default_rng(1)
    values = np.sort(rng.exponential(size=40))
    weights = rng.integers(0, 4, size=(30, 40))
    weights[0] = 0
    weights[1] = 0
    weights[1, 7] = 1  # a single value
    got = weighted_quantiles(values, weights, [0.0, 0.5, 0.9, 0.99, 1.0])
    for row, w in enumerate(weights[1:], 1):
        expanded = np.repeat(values, w)
        assert got[:, row] == pytest.approx(np.percentile(expanded, [0, 50, 90, 99, 100]))
    assert np.isnan(got[:, 0]).all()


@pytest.mark.parametrize("n", [40, 200])
def test_intervals_cover_the_true_value_95_percent_of_the_time(n):
    """Exponential(1): true mean 1 (bootstrap), median ln 2 and p90 ln 10 (order statistics); 400 samples of n."""
    rng = np.random.default_rng(2026 + n)
    truth = {"mean": 1.0, "p50": math.log(2), "p90": math.log(10)}
    hits = dict.fromkeys(truth, 0)
    draws = 2 * DRAWS
    for draw in range(draws):
        values = rng.exponential(size=n)
        found = intervals({s: Statistic(s, values) for s in truth}, key=("coverage", n, draw), resamples=RESAMPLES)
        for stat, iv in found.items():
            hits[stat] += iv.low <= truth[stat] <= iv.high
    for stat, h in hits.items():
        assert 0.92 <= coverage(h, draws) <= 0.99, (stat, coverage(h, draws))
    print(f"coverage n={n}: " + ", ".join(f"{s} {coverage(h, draws):.3f}" for s, h in hits.items()))


def test_inter_token_gaps_are_resampled_with_their_request():
    """Gaps of one request share its speed: resampling requests covers, resampling gaps alone does not."""
    rng = np.random.default_rng(5)
    hits_cluster = hits_naive = 0
    draws = 150
    for draw in range(draws):
        speed = rng.lognormal(0.0, 0.4, size=30)  # per request
        gaps = speed[:, None] * rng.exponential(1.0, size=(30, 20))
        owners = np.repeat(np.arange(30), 20)
        truth = math.exp(0.4 ** 2 / 2)  # E[speed] * E[exponential]
        cluster = interval(Statistic("mean", gaps.ravel(), owners), key=("itl", draw), resamples=RESAMPLES)
        naive = interval(Statistic("mean", gaps.ravel()), key=("itl-naive", draw), resamples=RESAMPLES, blocks=False)
        hits_cluster += cluster.low <= truth <= cluster.high
        hits_naive += naive.low <= truth <= naive.high
    print(f"coverage of gaps: by request {coverage(hits_cluster, draws):.3f}, "
          f"gap by gap {coverage(hits_naive, draws):.3f}")
    assert 0.91 <= coverage(hits_cluster, draws) <= 0.99, coverage(hits_cluster, draws)
    assert coverage(hits_naive, draws) < 0.8, coverage(hits_naive, draws)


def test_rate_statistic_is_tokens_over_wall_time():
    e2e = np.array([0.5, 1.0, 1.5, 1.0, 0.5, 1.5] * 2)
    tokens = np.array([10, 20, 30, 20, 10, 30] * 2, dtype=float)
    wall = 6.0  # 2 users in flight on average: sum(E2E) / wall = 2
    s = Statistic("rate", tokens, None, e2e, scale=e2e.sum() / wall)
    assert s.point() == pytest.approx(tokens.sum() / wall)
    iv = interval(s, key=("rate",))
    assert iv.low <= iv.value <= iv.high and iv.high - iv.low < 1e-9  # tokens are proportional to E2E here


def test_paired_ratio_covers_the_true_ratio_and_beats_the_unpaired_one():
    """Prompts differ 3x in cost; server B takes exactly twice A's time plus its own noise."""
    rng = np.random.default_rng(11)
    prompts = np.array([f"p{i}" for i in range(24)])
    hits = 0
    widths_paired, widths_unpaired = [], []
    for draw in range(DRAWS):
        cost = rng.lognormal(0.0, 0.6, size=24)
        a = cost * rng.lognormal(0.0, 0.1, size=24)
        b = 2.0 * cost * rng.lognormal(0.0, 0.1, size=24)
        paired, was_paired = ratio_interval(Statistic("mean", b, prompts), Statistic("mean", a, prompts),
                                            key=("paired", draw), resamples=RESAMPLES)
        assert was_paired
        unpaired, _ = ratio_interval(Statistic("mean", b, prompts), Statistic("mean", a, prompts),
                                     key=("unpaired", draw), paired=False, resamples=RESAMPLES)
        hits += paired.low <= 2.0 <= paired.high
        widths_paired.append(paired.high - paired.low)
        widths_unpaired.append(unpaired.high - unpaired.low)
    print(f"coverage of the paired ratio {coverage(hits):.3f}, width paired / unpaired "
          f"{np.median(widths_paired) / np.median(widths_unpaired):.2f}")
    assert 0.91 <= coverage(hits) <= 0.99, coverage(hits)
    assert np.median(widths_paired) < 0.5 * np.median(widths_unpaired)


def test_identical_servers_rarely_differ_and_a_2x_one_always():
    rng = np.random.default_rng(12)
    prompts = np.array([f"p{i}" for i in range(12)])
    same = double = 0
    for draw in range(DRAWS):
        a, b = rng.lognormal(0.0, 0.3, size=12), rng.lognormal(0.0, 0.3, size=12)
        same += bool(ratio_interval(Statistic("p50", b, prompts), Statistic("p50", a, prompts),
                                    key=("same", draw), resamples=RESAMPLES)[0].excludes_one)
        double += bool(ratio_interval(Statistic("p50", 2 * b, prompts), Statistic("p50", a, prompts),
                                      key=("double", draw), resamples=RESAMPLES)[0].excludes_one)
    print(f"p50 ratio excludes 1: identical {same / DRAWS:.3f}, 2x {double / DRAWS:.3f}")
    assert same / DRAWS <= 0.07 and double / DRAWS >= 0.95


def test_a_within_run_ratio_is_never_called_significant():
    """Runs differ by more than one run's interval shows: only an interval that covers runs may be significant."""
    iv = Interval(2.0, 1.9, 2.1, 10, WITHIN_RUN)
    assert iv.excludes_one and iv.significant is None
    assert Interval(2.0, 1.9, 2.1, 10, CALIBRATED).significant
    assert repeat_ratio_interval([20.0, 21.0, 19.5], [10.0, 10.2, 9.9]).significant
    prompts = np.array([f"p{i}" for i in range(20)])
    found, _ = ratio_interval(Statistic("mean", np.full(20, 2.0) + np.arange(20) / 100, prompts),
                             Statistic("mean", np.ones(20) + np.arange(20) / 200, prompts))
    assert found.covers == WITHIN_RUN and found.excludes_one and found.significant is None


def test_the_same_key_gives_the_same_interval_and_another_key_other_draws():
    values = np.random.default_rng(3).exponential(size=100)
    a = interval(Statistic("mean", values), key=("cell", "x"))
    assert interval(Statistic("mean", values), key=("cell", "x")) == a
    assert interval(Statistic("mean", values), key=("cell", "y")) != a


def test_too_few_values_give_no_value_and_a_max_no_interval():
    assert interval(Statistic("mean", [1.0, 2.0, 3.0])) == Interval(None, n=3)
    iv = interval(Statistic("max", [1.0, 5.0, 3.0]))
    assert iv.value == 5.0 and not iv.has_interval
    assert Interval(2.0, 1.5, 2.5).significant and not Interval(1.0, 0.9, 1.2).significant
    assert Interval(2.0).significant is None


def test_expanded_percentile_interval_tends_to_the_plain_one():
    assert expanded_alpha(8) < expanded_alpha(30) < expanded_alpha(10 ** 6)
    assert expanded_alpha(10 ** 6) == pytest.approx((1 - CONFIDENCE) / 2, abs=1e-4)


def test_repeat_interval_is_students_t_and_covers():
    assert t_quantile(1) == pytest.approx(12.706) and t_quantile(2) == pytest.approx(4.303)
    assert t_quantile(60) == pytest.approx(2.000, abs=2e-3) and t_quantile(1000) == pytest.approx(1.962, abs=1e-3)
    iv = repeat_interval([10.0, 12.0, 11.0])
    assert iv.value == pytest.approx(11.0) and iv.high - iv.value == pytest.approx(4.303 / math.sqrt(3))
    assert iv.covers == "across 3 repeats"
    assert not repeat_interval([10.0]).has_interval
    rng = np.random.default_rng(4)
    hits = 0
    for _ in range(DRAWS * 5):
        iv = repeat_interval(rng.normal(100.0, 5.0, size=3))
        hits += iv.low <= 100.0 <= iv.high
    print(f"coverage over 3 repeats {hits / (DRAWS * 5):.3f}")
    assert 0.93 <= hits / (DRAWS * 5) <= 0.97



@pytest.mark.unit
def test_repeat_interval_of_positive_figures_spread_several_fold_stays_positive():
    """Runs of one latency 10x apart: the linear t interval would go below 0; the log-scale one stays positive
    and still holds the mean."""
    values = [300.0, 3000.0, 400.0, 3500.0, 350.0]
    iv = repeat_interval(values)
    mean = sum(values) / 5
    linear_low = mean - t_quantile(4) * float(np.std(values, ddof=1)) / math.sqrt(5)
    assert linear_low < 0 < iv.low <= mean <= iv.high and iv.covers == "across 5 repeats"
    logs = np.log(values)
    assert iv.high == pytest.approx(math.exp(logs.mean() + t_quantile(4) * logs.std(ddof=1) / math.sqrt(5)))
    assert repeat_interval([10.0, 12.0, 11.0]).low == pytest.approx(11 - t_quantile(2) / math.sqrt(3))  # linear

def test_repeat_ratio_interval_over_repeats():
    iv = repeat_ratio_interval([20.0, 21.0, 19.5], [10.0, 10.2, 9.9])
    assert iv.value == pytest.approx(20.1667 / 10.0333, rel=1e-3) and iv.significant
    assert iv.covers == "across 3 + 3 repeats"
    assert not repeat_ratio_interval([10.0, 11.0, 9.0], [10.5, 9.5, 10.0]).significant
    assert not repeat_ratio_interval([10.0], [10.0, 11.0]).has_interval


def test_widened_interval_adds_the_run_to_run_spread_on_the_log_scale():
    iv = Interval(2.0, 1.9, 2.1, 10, WITHIN_RUN)
    z = 1.959964
    wide = widened(iv, 0.03)  # without degrees of freedom: the normal quantile
    assert wide.low == pytest.approx(2.0 * math.exp(-math.hypot(math.log(2.0 / 1.9), z * 0.03)))
    assert wide.high == pytest.approx(2.0 * math.exp(math.hypot(math.log(2.1 / 2.0), z * 0.03)))
    assert wide.covers == CALIBRATED
    # with 4 degrees of freedom and a spread that dominates: close to t(4) * spread
    assert math.log(2.0 / widened(Interval(2.0, 1.999, 2.001), 0.1, 4).low) == pytest.approx(2.776 * 0.1, rel=1e-3)
    assert widened(iv, 0.0).low == pytest.approx(iv.low) and widened(Interval(None, n=3), 0.03) == Interval(None, n=3)
    assert not widened(Interval(1.05, 1.01, 1.09, 10, WITHIN_RUN), 0.03).significant
    low = widened(Interval(0.0, -1.0, 1.0), 0.5)  # an interval through 0: on the linear scale
    assert low.low == -1.0 and low.high == 1.0
    # a run whose own interval is narrower than the calibration's typical within-run error: at least that
    assert math.log(2.0 / widened(Interval(2.0, 1.999, 2.001), 0.1, 4, within=0.1).low) == pytest.approx(
        2.776 * math.hypot(0.1, 0.1), rel=1e-3)
    sd, df = combined_spread((0.03, 7), (0.04, 7))
    assert sd == pytest.approx(0.05) and 7 < df < 14


def test_block_length_finds_what_autocorrelation_there_is():
    rng = np.random.default_rng(21)
    assert [block_length(rng.normal(size=500)) for _ in range(20)].count(1) >= 18
    lengths = {phi: np.median([block_length(ar1(rng, 1000, phi)) for _ in range(10)]) for phi in (0.5, 0.8, 0.95)}
    assert 6 <= lengths[0.5] < lengths[0.8] < lengths[0.95] <= math.ceil(3 * math.sqrt(1000)), lengths
    assert block_length(np.ones(100)) == 1 and block_length(np.arange(5.0)) == 1


@pytest.mark.parametrize("method", ["circular", "moving", "stationary"])
def test_block_counts_draw_runs_of_consecutive_units(method):
    counts = block_counts(50, 300, np.random.default_rng(1), 10, method)
    assert counts.shape == (300, 50) and (counts.sum(axis=1) == 50).all()
    if method != "stationary":  # ceil(50 / 10) blocks of 10: a drawn unit's neighbours come with it
        neighbours = np.minimum(counts[:, 20:30], counts[:, 21:31])
        assert (neighbours > 0).mean() > 0.9 * (counts[:, 20:30] > 0).mean()
    share = counts.mean(axis=0)
    if method == "moving":  # the moving blocks under-draw both ends
        assert share[0] < 0.5 and share[25] > 0.8
    else:
        assert np.allclose(share, 1.0, atol=0.25)


def test_blocks_cover_an_autocorrelated_series_where_independent_resampling_does_not():
    """AR(1) 0.6, 400 requests: the circular blocks cover the mean and median near 95 %; resampling requests as
    if independent (the old method) covers the mean about 64 % and the median about 81 % of the time."""
    rng = np.random.default_rng(3)
    truth = {"mean": math.exp(0.125), "p50": 1.0}
    hits = {(m, s): 0 for m in ("blocks", "independent") for s in truth}
    draws = 120
    for draw in range(draws):
        x = ar1(rng, 400, 0.6)
        for method, blocks in (("blocks", True), ("independent", False)):
            found = intervals({s: Statistic(s, x) for s in truth}, ("ar1", draw), RESAMPLES, blocks=blocks)
            for s, iv in found.items():
                hits[(method, s)] += iv.low <= truth[s] <= iv.high
    share = {k: h / draws for k, h in hits.items()}
    print("coverage under AR(1) 0.6: " + ", ".join(f"{m} {s} {v:.2f}" for (m, s), v in share.items()))
    assert all(0.89 <= share[("blocks", s)] <= 0.99 for s in truth), share
    assert share[("independent", "mean")] <= 0.75 and share[("independent", "p50")] <= 0.88, share


def test_paired_ratio_uses_blocks_of_the_time_order():
    """Two servers answer the same 300 prompt occurrences in the same order; each drifts (AR(1) 0.6 on its log
    latency); B is 1.5 x A. Paired blocks cover the true ratio; pairs resampled one by one undercover."""
    rng = np.random.default_rng(13)
    prompts = np.array([f"p{i:03d}#0" for i in range(300)])
    hits = {True: 0, False: 0}
    draws = 150
    for draw in range(draws):
        cost = rng.lognormal(0.0, 0.5, size=300)
        a, b = cost * ar1(rng, 300, 0.6), 1.5 * cost * ar1(rng, 300, 0.6)
        for blocks in hits:
            iv, paired = ratio_interval(Statistic("mean", b, prompts), Statistic("mean", a, prompts),
                                        key=("drift", draw), resamples=RESAMPLES, blocks=blocks)
            assert paired
            hits[blocks] += iv.low <= 1.5 <= iv.high
    print(f"paired ratio under drift: blocks {hits[True] / draws:.2f}, independent {hits[False] / draws:.2f}")
    assert 0.9 <= hits[True] / draws <= 0.99 and hits[False] / draws <= 0.8, hits


def test_repeats_cover_the_mean_over_runs_where_pooled_requests_do_not():
    """Runs differ by a known 10 % (between-run sd) on top of AR(1) requests: Student's t over 3 or 8 repeats'
    figures covers the cell's mean over runs near 95 %; one interval over 3 runs' requests pooled does not."""
    rng = np.random.default_rng(17)
    truth, tau = math.exp(0.125), 0.10
    draws = 150
    for repeats in (3, 8):
        hits_t = hits_pooled = 0
        for draw in range(draws):
            runs = [ar1(rng, 100, 0.3) * math.exp(rng.normal(0.0, tau) - tau ** 2 / 2) for _ in range(repeats)]
            t = repeat_interval([float(x.mean()) for x in runs])
            hits_t += t.low <= truth <= t.high
            if repeats == 3:
                pooled = interval(Statistic("mean", np.concatenate(runs)), ("pooled", draw), RESAMPLES)
                hits_pooled += pooled.low <= truth <= pooled.high
        print(f"{repeats} repeats: t over repeats {hits_t / draws:.2f}"
              + (f", pooled requests {hits_pooled / draws:.2f}" if repeats == 3 else ""))
        assert 0.9 <= hits_t / draws <= 0.99
    assert hits_pooled / draws <= 0.8


def test_repeats_paired_by_block_cancel_a_block_effect():
    """Both servers' figures move together by a block's effect (sd 20 % between blocks, 4 % each side on its own);
    true ratio 2. Student's t over each block's ratio covers 2 near 95 % with 3 or 5 blocks, and without a block
    effect too; Welch's t over the unpaired figures covers (it is conservative: it counts the block effect twice
    over as noise) at more than twice the width."""
    rng = np.random.default_rng(23)
    draws = 2000
    for repeats, block_sd in ((3, 0.2), (5, 0.2), (3, 0.0)):
        paired_hits = welch_hits = 0
        widths = []
        for _ in range(draws):
            block = rng.normal(0.0, block_sd, repeats)
            top = 20.0 * np.exp(block + rng.normal(0.0, 0.04, repeats))
            bottom = 10.0 * np.exp(block + rng.normal(0.0, 0.04, repeats))
            paired = block_ratio_interval(dict(enumerate(top)), dict(enumerate(bottom)))
            welch = repeat_ratio_interval(top, bottom)
            paired_hits += paired.low <= 2.0 <= paired.high
            welch_hits += welch.low <= 2.0 <= welch.high
            widths.append(math.log(paired.high / paired.low) / math.log(welch.high / welch.low))
        print(f"{repeats} blocks, block sd {block_sd}: paired {paired_hits / draws:.3f}, Welch "
              f"{welch_hits / draws:.3f}, median width paired / Welch {np.median(widths):.2f}")
        assert 0.93 <= paired_hits / draws <= 0.97 and welch_hits / draws >= 0.93
        if block_sd:
            assert np.median(widths) < 0.5
    iv = block_ratio_interval({1: 20.0, 2: 22.0, 3: 18.0, 4: 30.0, 5: 31.0}, {1: 10.0, 2: 11.0, 3: 9.1})
    assert iv.n == 3 and iv.covers == "across 3 paired repeats" and iv.value == pytest.approx(60.0 / 30.1)
    assert iv.significant and iv.low < 60.0 / 30.1 < iv.high
    assert not block_ratio_interval({1: 20.0, 2: 22.0}, {2: 11.0, 3: 9.0}).has_interval  # one block in common


def test_windowed_bootstrap_percentiles_equal_the_full_computation():
    """Large clustered samples (inter-token gaps) take their percentiles from a window of ranks: same numbers."""
    rng = np.random.default_rng(8)
    speed = rng.lognormal(0.0, 0.5, size=300)
    values = (speed[:, None] * rng.exponential(1.0, size=(300, 20))).ravel()
    owners = np.repeat(np.arange(300), 20)
    order = np.argsort(values, kind="stable")
    counts = resample_counts(300, 500, rng)
    for q in (0.5, 0.9, 0.99):
        full = weighted_quantiles(values[order], counts[:, owners[order]], [q])[0]
        assert windowed_quantile(values[order], owners[order], counts, q) == pytest.approx(full)
    s = Statistic("p90", values, owners)
    assert s.n >= WINDOW_VALUES
    assert s.quantile_replicates(np.arange(300), counts, [0.9])[0] == pytest.approx(
        weighted_quantiles(values[order], counts[:, owners[order]], [0.9])[0])
