package serve

import "github.com/prometheus/client_golang/prometheus"

var (
	descQueued    = prometheus.NewDesc("trajflow_serve_queued_groups", "Kept groups committed and in no step yet.", nil, nil)
	descWaiting   = prometheus.NewDesc("trajflow_serve_waiting_requests", "Trainers waiting for a step.", nil, nil)
	descDemand    = prometheus.NewDesc("trajflow_serve_demand_groups", "Kept groups the run is asked for in all.", nil, nil)
	descSteps     = prometheus.NewDesc("trajflow_serve_steps", "Steps made, by state (acked, leased, pending: to be served again).", []string{"state"}, nil)
	descServed    = prometheus.NewDesc("trajflow_serve_steps_served_total", "Steps made and served since the start.", nil, nil)
	descReserved  = prometheus.NewDesc("trajflow_serve_steps_reserved_total", "Steps served again (lease run out, or a restart) since the start.", nil, nil)
	descExpired   = prometheus.NewDesc("trajflow_serve_leases_expired_total", "Leases that ran out since the start.", nil, nil)
	descAcked     = prometheus.NewDesc("trajflow_serve_acks_total", "Steps acknowledged since the start.", nil, nil)
	descVersion   = prometheus.NewDesc("trajflow_serve_policy_version", "The fleet's policy version.", nil, nil)
	descPaused    = prometheus.NewDesc("trajflow_serve_paused", "1 while the fleet is paused.", nil, nil)
	descStaleness = prometheus.NewDesc("trajflow_serve_queued_groups_by_staleness", "Queued groups by how many policy versions their oldest token is behind.", []string{"versions_behind"}, nil)
	descStale     = prometheus.NewDesc("trajflow_serve_stale_groups", "Kept groups never served because they were more than serve.max_staleness versions behind when a step was made, since the first start.", nil, nil)
	descRequeued  = prometheus.NewDesc("trajflow_serve_stale_groups_requeued_total", "Stale groups whose tasks were handed back to the run to be sampled again (serve.on_stale requeue) since the start.", nil, nil)
	descShare     = prometheus.NewDesc("trajflow_serve_stale_share", "Share of the latest kept groups decided (handed out or set aside; four steps' worth, at least 32) that were set aside as stale.", nil, nil)
	descAlarm     = prometheus.NewDesc("trajflow_serve_stale_alarm", "1 while more than half of a full window of the latest kept groups decided were set aside as stale.", nil, nil)
	descDriftStep = prometheus.NewDesc("trajflow_serve_drift_step", "The latest step acknowledged with the trainer's logprobs (drift).", nil, nil)
	descDriftMean = prometheus.NewDesc("trajflow_serve_drift_mean_abs", "The latest drift step's mean |log π_trainer − log π_engine| over its tokens, by how many versions they are behind the trainer's.", []string{"lag"}, nil)
	descDriftMax  = prometheus.NewDesc("trajflow_serve_drift_max_abs", "The latest drift step's largest |log π_trainer − log π_engine|, by lag.", []string{"lag"}, nil)
	descDriftK3   = prometheus.NewDesc("trajflow_serve_drift_k3", "The latest drift step's k3 estimate of KL(engine ‖ trainer) per token, by lag.", []string{"lag"}, nil)
	descDriftOut  = prometheus.NewDesc("trajflow_serve_drift_outside_share", "The latest drift step's share of tokens whose ratio π_trainer/π_engine lies outside [1/c, c] (serve.drift_ratio), by lag.", []string{"lag"}, nil)
	descEvalVer   = prometheus.NewDesc("trajflow_serve_eval_version", "The policy version of the latest evaluation (serve.eval).", nil, nil)
	descEvalPass1 = prometheus.NewDesc("trajflow_serve_eval_pass_at_1", "The latest evaluation's pass@1.", nil, nil)
	descEvalPassK = prometheus.NewDesc("trajflow_serve_eval_pass_at_k", "The latest evaluation's pass@k, k the samples a task (serve.eval.n).", nil, nil)
	descEvalMean  = prometheus.NewDesc("trajflow_serve_eval_mean_reward", "The latest evaluation's mean reward.", nil, nil)
	serveDescs    = []*prometheus.Desc{descEvalVer, descEvalPass1, descEvalPassK, descEvalMean, descDriftStep, descDriftMean, descDriftMax, descDriftK3, descDriftOut, descQueued, descWaiting, descDemand, descSteps, descServed, descReserved, descExpired, descAcked, descVersion, descPaused, descStaleness, descStale, descRequeued, descShare, descAlarm}
)

// collector serves the service's gauges on run.metrics_addr.
type collector struct{ s *service }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range serveDescs {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(descQueued, float64(st.QueuedGroups))
	gauge(descWaiting, float64(len(st.Waiting)))
	gauge(descDemand, float64(st.Demand))
	gauge(descSteps, float64(st.Steps.Acked), "acked")
	gauge(descSteps, float64(st.Steps.Leased), "leased")
	gauge(descSteps, float64(st.Steps.Pending), "pending")
	counter(descServed, float64(st.Served))
	counter(descReserved, float64(st.Reserved))
	counter(descExpired, float64(st.Expired))
	counter(descAcked, float64(st.Acked))
	gauge(descVersion, float64(st.PolicyVersion))
	paused := 0.0
	if st.Paused {
		paused = 1
	}
	gauge(descPaused, paused)
	for lag, n := range st.Staleness {
		gauge(descStaleness, float64(n), lag)
	}
	gauge(descStale, float64(st.StaleGroups))
	counter(descRequeued, float64(st.RequeuedGroups))
	gauge(descShare, st.StaleShare)
	alarm := 0.0
	if st.StaleAlarm != nil {
		alarm = 1
	}
	gauge(descAlarm, alarm)
	if e := st.Eval; e != nil && len(e.Results) > 0 {
		r := e.Results[len(e.Results)-1]
		gauge(descEvalVer, float64(r.Version))
		gauge(descEvalPass1, r.PassAt1)
		gauge(descEvalPassK, r.PassAtK)
		gauge(descEvalMean, r.MeanReward)
	}
	if d := st.Drift; d != nil {
		gauge(descDriftStep, float64(d.Last.Step))
		for lag, v := range d.Last.ByLag {
			gauge(descDriftMean, v.MeanAbs, lag)
			gauge(descDriftMax, v.MaxAbs, lag)
			gauge(descDriftK3, v.K3, lag)
			gauge(descDriftOut, v.Outside, lag)
		}
	}
}
