package inject

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Webhook paths: the MutatingWebhookConfiguration's two entries.
const (
	PathOptIn     = "/inject"           // pods annotated inferwatch.io/inject: "true"
	PathNamespace = "/inject/namespace" // pods of namespaces labelled inferwatch.io/inject=enabled
)

// maxReviewBytes bounds a request body (the apiserver's own limit is 3 MiB of object).
const maxReviewBytes = 8 << 20

// Webhook answers AdmissionReview requests for pods.
type Webhook struct {
	cfg     Config
	logger  *slog.Logger
	Metrics *metrics.Set
	mux     *http.ServeMux
	// Events, when set, receives every pod the injector refused (fail-open).
	Events *Events
}

// NewWebhook builds the handler; cfg must have passed Validate.
func NewWebhook(cfg Config, logger *slog.Logger) *Webhook {
	w := &Webhook{cfg: cfg, logger: logger, Metrics: metrics.NewSet(), mux: http.NewServeMux()}
	w.mux.HandleFunc("POST "+PathOptIn, func(rw http.ResponseWriter, r *http.Request) { w.serve(rw, r, OptIn) })
	w.mux.HandleFunc("POST "+PathNamespace, func(rw http.ResponseWriter, r *http.Request) { w.serve(rw, r, Namespace) })
	w.mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, "ok\n") })
	return w
}

func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) { w.mux.ServeHTTP(rw, r) }

func (w *Webhook) count(path, action string, start time.Time) {
	w.Metrics.GetOrCreateCounter(fmt.Sprintf(`inferwatch_injector_reviews_total{path=%q,action=%q}`, path, action)).Inc()
	w.Metrics.GetOrCreateHistogram(fmt.Sprintf(`inferwatch_injector_review_duration_seconds{path=%q}`, path)).UpdateDuration(start)
}

func (w *Webhook) serve(rw http.ResponseWriter, r *http.Request, mode Mode) {
	start := time.Now()
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		w.count(r.URL.Path, "bad_request", start)
		http.Error(rw, "inject: content type must be application/json, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil || len(body) > maxReviewBytes {
		w.count(r.URL.Path, "bad_request", start)
		http.Error(rw, "inject: request body unreadable or over 8 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	out, rv, status, err := review(w.cfg, mode, body)
	action := rv.action
	if err != nil {
		w.count(r.URL.Path, "bad_request", start)
		w.logger.Warn("inject: bad admission review", "err", err)
		http.Error(rw, err.Error(), status)
		return
	}
	w.count(r.URL.Path, action, start)
	rw.Header().Set("Content-Type", "application/json")
	rw.Write(out)
	if action == "skipped" && w.Events != nil && !rv.dryRun {
		w.Events.Refused(rv.namespace, &rv.pod, rv.reason, time.Now())
	}
}

// reviewed is what review learnt besides its answer.
type reviewed struct {
	action, reason string
	namespace      string
	pod            metav1.ObjectMeta // name, generateName, owners: what an Event regards
	dryRun         bool              // no side effects (the configuration says NoneOnDryRun)
}

// Review answers one AdmissionReview body. An error (with an HTTP status)
// means the body is not an AdmissionReview at all; a review it can read is
// always allowed — a pod it cannot handle runs uninjected, with a warning.
// action is the Outcome's: injected, skipped or ignored.
func Review(cfg Config, mode Mode, body []byte) (out []byte, action string, status int, err error) {
	out, rv, status, err := review(cfg, mode, body)
	if err != nil {
		return nil, "", status, err
	}
	return out, rv.action, status, nil
}

func review(cfg Config, mode Mode, body []byte) (out []byte, rv reviewed, status int, err error) {
	if out, rv, ok := reviewPodCreate(cfg, mode, body); ok {
		return out, rv, http.StatusOK, nil
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, rv, http.StatusBadRequest, fmt.Errorf("inject: decode AdmissionReview: %w", err)
	}
	if in.APIVersion != admissionv1.SchemeGroupVersion.String() || in.Kind != "AdmissionReview" {
		return nil, rv, http.StatusBadRequest, fmt.Errorf("inject: want admission.k8s.io/v1 AdmissionReview, got %s %s", in.APIVersion, in.Kind)
	}
	if in.Request == nil || in.Request.UID == "" {
		return nil, rv, http.StatusBadRequest, fmt.Errorf("inject: AdmissionReview has no request or no request uid")
	}
	req := in.Request
	rv.namespace, rv.pod.Name = req.Namespace, req.Name
	rv.dryRun = req.DryRun != nil && *req.DryRun
	outcome := func() Outcome {
		if req.Kind.Kind != "Pod" || req.Kind.Group != "" || req.SubResource != "" {
			return Outcome{Action: "ignored", Reason: fmt.Sprintf("not a pod: %s/%s %s", req.Kind.Group, req.Kind.Kind, req.SubResource)}
		}
		if req.Operation != admissionv1.Create {
			return Outcome{Action: "ignored", Reason: "operation " + string(req.Operation)}
		}
		var pod corev1.Pod
		if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
			return Outcome{Action: "skipped", Reason: "pod object does not decode: " + err.Error()}
		}
		rv.regards(&pod)
		return Mutate(cfg, mode, &pod)
	}()
	rv.action, rv.reason = outcome.Action, outcome.Reason
	out, status, err = respond(in.TypeMeta, req.UID, outcome)
	return out, rv, status, err
}

// regards notes what an Event about pod names: its name (a pod a
// controller creates has none yet), generateName and owners.
func (rv *reviewed) regards(pod *corev1.Pod) {
	if pod.Name != "" {
		rv.pod.Name = pod.Name
	}
	rv.pod.GenerateName, rv.pod.OwnerReferences = pod.GenerateName, pod.OwnerReferences
}

// podCreateReview is the part of an AdmissionReview the common case needs,
// with the pod decoded in the same pass as the review: decoding the review
// and then its object again (a runtime.RawExtension, copied) read every pod
// twice more and was half of a review's cost (BenchmarkReview).
type podCreateReview struct {
	metav1.TypeMeta `json:",inline"`
	Request         *struct {
		UID         types.UID               `json:"uid"`
		Kind        metav1.GroupVersionKind `json:"kind"`
		SubResource string                  `json:"subResource"`
		Operation   admissionv1.Operation   `json:"operation"`
		Namespace   string                  `json:"namespace"`
		Name        string                  `json:"name"`
		DryRun      *bool                   `json:"dryRun"`
		Object      *corev1.Pod             `json:"object"`
	} `json:"request"`
}

// reviewPodCreate answers a well-formed review of a pod's creation in one
// decoding pass; ok is false for anything else, which review then reads the
// general way (with its errors and outcomes), so the answers are the same.
func reviewPodCreate(cfg Config, mode Mode, body []byte) (out []byte, rv reviewed, ok bool) {
	var in podCreateReview
	if json.Unmarshal(body, &in) != nil {
		return nil, rv, false
	}
	req := in.Request
	if in.APIVersion != admissionv1.SchemeGroupVersion.String() || in.Kind != "AdmissionReview" || req == nil || req.UID == "" ||
		req.Kind.Kind != "Pod" || req.Kind.Group != "" || req.SubResource != "" || req.Operation != admissionv1.Create || req.Object == nil {
		return nil, rv, false
	}
	rv.namespace, rv.pod.Name = req.Namespace, req.Name
	rv.dryRun = req.DryRun != nil && *req.DryRun
	rv.regards(req.Object)
	outcome := Mutate(cfg, mode, req.Object)
	rv.action, rv.reason = outcome.Action, outcome.Reason
	out, _, err := respond(in.TypeMeta, req.UID, outcome)
	return out, rv, err == nil
}

// respond encodes the AdmissionReview answering a review with outcome.
func respond(tm metav1.TypeMeta, uid types.UID, outcome Outcome) (out []byte, status int, err error) {
	resp := &admissionv1.AdmissionResponse{UID: uid, Allowed: true}
	if outcome.Action == "skipped" {
		resp.Warnings = []string{"inferwatch sidecar not injected: " + outcome.Reason}
		resp.Result = &metav1.Status{Message: outcome.Reason}
	}
	if len(outcome.Patch) > 0 {
		p, err := MarshalPatch(outcome.Patch)
		if err != nil {
			return nil, http.StatusInternalServerError, err
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = p, &pt
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: tm, Response: resp})
	if err != nil {
		return nil, http.StatusInternalServerError, fmt.Errorf("inject: encode AdmissionReview: %w", err)
	}
	return b, http.StatusOK, nil
}
