package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func randomInput(seed uint64, batch int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, batch*InputSize)
	for i := range x {
		x[i] = r.Float32()
	}
	return x
}

func TestInferProbabilities(t *testing.T) {
	tests := []struct {
		name  string
		seed  uint64
		batch int
	}{
		{"single", 1, 1},
		{"batch", 2, 8},
		{"empty", 3, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := NewMLP(tc.seed).Infer(randomInput(tc.seed, tc.batch), tc.batch)
			if len(out) != tc.batch*OutputSize {
				t.Fatalf("len(out) = %d, want %d", len(out), tc.batch*OutputSize)
			}
			for b := range tc.batch {
				row := out[b*OutputSize : (b+1)*OutputSize]
				var sum float64
				for _, p := range row {
					if p < 0 || p > 1 || math.IsNaN(float64(p)) {
						t.Fatalf("row %d: probability %v out of [0,1]", b, p)
					}
					sum += float64(p)
				}
				if math.Abs(sum-1) > 1e-5 {
					t.Errorf("row %d sums to %v, want 1", b, sum)
				}
			}
		})
	}
}

func TestInferDeterministic(t *testing.T) {
	x := randomInput(7, 4)
	a := NewMLP(42).Infer(x, 4)
	b := NewMLP(42).Infer(x, 4)
	if !slices.Equal(a, b) {
		t.Fatal("same seed gave different outputs")
	}
	if c := NewMLP(43).Infer(x, 4); slices.Equal(a, c) {
		t.Fatal("different seeds gave identical outputs")
	}
}

func TestInferRowsIndependent(t *testing.T) {
	m := NewMLP(5)
	x := randomInput(9, 3)
	all := m.Infer(x, 3)
	for b := range 3 {
		one := m.Infer(x[b*InputSize:(b+1)*InputSize], 1)
		if !slices.Equal(one, all[b*OutputSize:(b+1)*OutputSize]) {
			t.Errorf("row %d differs when inferred alone", b)
		}
	}
}

func TestInferPanicsOnBadShape(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a short input")
		}
	}()
	NewMLP(1).Infer(make([]float32, 10), 1)
}

func BenchmarkInfer(b *testing.B) {
	m := NewMLP(1)
	x := randomInput(1, 1)
	for b.Loop() {
		m.Infer(x, 1)
	}
}
