package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestTFServingRecognised(t *testing.T) {
	tests := []struct {
		name    string
		c       corev1.Container
		kind    serverKind
		restOff bool
	}{
		{"the official image", corev1.Container{Image: "tensorflow/serving:2.15.1"}, kindTFServing, false},
		{"the official image, GPU tag, a registry", corev1.Container{Image: "docker.io/tensorflow/serving:latest-gpu"}, kindTFServing, false},
		{"the official image by digest", corev1.Container{Image: "tensorflow/serving@sha256:0123"}, kindTFServing, false},
		{"a registry with a port", corev1.Container{Image: "registry:5000/tensorflow/serving"}, kindTFServing, false},
		{"the official image, REST turned off", corev1.Container{Image: "tensorflow/serving", Args: []string{"--rest_api_port=0"}}, kindTFServing, true},
		{"the official image with its own command", corev1.Container{Image: "tensorflow/serving", Command: []string{"/bin/sh", "-c", "serve"}}, kindUnknown, false},
		{"another image named like it", corev1.Container{Image: "acme/tensorflow-serving-proxy:1"}, kindUnknown, false},
		{"the binary, no REST flag (off by default)", corev1.Container{Command: []string{"tensorflow_model_server"}, Args: []string{"--port=8500"}}, kindTFServing, true},
		{"the binary with REST on", corev1.Container{Command: []string{"/usr/bin/tensorflow_model_server", "--rest_api_port=8501"}}, kindTFServing, false},
		{"the entrypoint script", corev1.Container{Command: []string{"/usr/bin/tf_serving_entrypoint.sh"}}, kindTFServing, false},
		{"the binary, the last --port wins", corev1.Container{Command: []string{"tensorflow_model_server", "--port=9000", "--port=9100"}}, kindTFServing, true},
		{"the entrypoint script, the last flag wins", corev1.Container{Command: []string{"/usr/bin/tf_serving_entrypoint.sh"}, Args: []string{"--rest_api_port=8501", "--rest_api_port=0"}}, kindTFServing, true},
	}
	for _, tt := range tests {
		if got := kindOf(&tt.c); got != tt.kind {
			t.Errorf("%s: kind %d, want %d", tt.name, got, tt.kind)
		}
		if tt.kind == kindTFServing {
			if got := restOff(&tt.c); got != tt.restOff {
				t.Errorf("%s: REST off %v, want %v", tt.name, got, tt.restOff)
			}
		}
	}
}

// TestCurrentPortLastFlag: a flag given twice is the last one, as the
// servers' parsers keep it, whichever form it takes.
func TestCurrentPortLastFlag(t *testing.T) {
	for _, tt := range []struct {
		c    corev1.Container
		kind serverKind
		want int32
	}{
		{corev1.Container{Command: []string{"tensorflow_model_server", "--port=9000"}, Args: []string{"--port=9100"}}, kindTFServing, 9100},
		{corev1.Container{Command: []string{"tritonserver", "--grpc-port", "9001", "--grpc-port=9002"}}, kindTriton, 9002},
		{corev1.Container{Command: []string{"tritonserver"}}, kindTriton, 8001},
		{corev1.Container{Command: []string{"tritonserver", "--grpc-port=x"}}, kindTriton, 8001},
	} {
		if got := currentPort(&tt.c, tt.kind, "grpc", map[serverKind]int32{kindTFServing: 8500, kindTriton: 8001}[tt.kind]); got != tt.want {
			t.Errorf("%v: port %d, want %d", append(tt.c.Command, tt.c.Args...), got, tt.want)
		}
	}
}
