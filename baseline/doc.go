// Package baseline learns a model's latency pattern and flags deviations
// from it (seed §3.1, dynamic-baseline alerting; §5 the troubleshooting
// handbook's spikes, leaks and noisy neighbours).
//
// # The model
//
// Fit regresses log latency on
//
//	intercept + linear trend
//	+ daily Fourier terms (order DailyOrder, default 4, Prophet's 4)
//	+ weekly Fourier terms (order WeeklyOrder, default 3, Prophet's 3)
//	+ load (QPS/QPS_ref and its square), when a load series is given
//
// by iteratively reweighted least squares (least squares, one Huber pass,
// then two Tukey bisquare passes, so that an incident or an outlier in the
// history gets weight zero rather than bending the fit). Log latency makes the effects
// multiplicative: load that doubles latency at the peak is a factor, not an
// offset. The regression runs on FitBin (default 5-minute) medians of the
// one-minute points: the median of a bin already drops isolated outliers,
// and the normal equations cost a fifth. The trend is not extrapolated past
// the fitted span (a slope fitted over two weeks is not a forecast for the
// next); the Detector's cheap level update carries slow moves between fits.
//
// Seasonality is claimed only with two full cycles of history: under two
// days the model is a robust trailing baseline (Kind "trailing": the median
// and MAD of the last hours), from two days it has the daily terms (Kind
// "daily"), from two weeks also the weekly ones (Kind "seasonal").
//
// Prediction intervals come from the residuals of the one-minute points:
// their scale is fitted as a + b/sqrt(QPS) when load is known (a P99 from
// fewer calls is noisier) and per hour of day otherwise, so bands widen at
// quiet hours and narrow at busy ones.
//
// # The detectors
//
// Detector runs in streaming order, without look-ahead, over standardised
// residuals z = (log v − prediction − level)/scale, and names the kind of
// what it flags: KindBurst (a run of large excesses: a noisy neighbour),
// KindLevelShift (CUSUM on the residuals: a step after a deploy),
// KindDrift (a sustained excess whose recent residuals rose gradually: a
// leak), KindLoadSensitivity (a sustained excess that, over the alert's
// span, follows load through the origin better than a constant, a ramp or
// a step: a changed throughput–latency slope), KindSpread (the variance of successive differences grows with the
// median unchanged) and KindPeriodic (exceedances recurring at a fixed
// period, which it reports). Each detector has its own hysteresis; excesses
// under MinExcess (default 20%, so harmless shifts under 10% never alert)
// are not incidents.
//
// Memory leaks are a trend problem of their own: Leak fits a robust
// (Theil–Sen) slope to RSS samples and projects the time to a limit.
package baseline
