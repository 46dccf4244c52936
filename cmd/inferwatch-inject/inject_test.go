package main

import (
	"io"
	"strings"
	"testing"
)

// TestInjectFlagErrors: a mistake in the injector's flags stops start-up
// with a message naming the flag.
func TestInjectFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-key=k"}, "tls-cert"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--image-pull-policy=Sometimes"}, "image-pull-policy"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--memory-limit=big"}, "memory-limit"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--push-url=vm:8428"}, "push-url"},
		{[]string{"--tls-cert=/nonexistent/c", "--tls-key=/nonexistent/k"}, "tls-cert"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--kube-api=http://127.0.0.1:6443", "--kube-token-file=/dev/null"}, "kube-api"},
		{[]string{"--tls-cert=c", "--tls-key=k", "--kube-api=https://127.0.0.1:6443"}, "kube-token-file"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			err := runInject(tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one naming %s", err, tc.want)
			}
		})
	}
}
