// Package model is the demo's model: a small multi-layer perceptron that does
// real FP32 arithmetic, so the embedded model server's "infer" stage costs
// what a tiny CPU model costs rather than a sleep.
package model

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Shape of the network: an MNIST-sized image in, ten class probabilities out.
const (
	InputSize  = 784
	HiddenSize = 128
	OutputSize = 10
)

// MLP is a 784→128→10 perceptron with ReLU and softmax. Its weights are
// fixed at construction, so Infer is safe for concurrent use.
type MLP struct {
	w1 []float32 // HiddenSize×InputSize, row-major
	b1 []float32
	w2 []float32 // OutputSize×HiddenSize, row-major
	b2 []float32
}

// NewMLP returns a network whose weights are drawn from a PCG generator
// seeded with seed: the same seed gives bit-identical outputs.
func NewMLP(seed uint64) *MLP {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	m := &MLP{
		w1: make([]float32, HiddenSize*InputSize),
		b1: make([]float32, HiddenSize),
		w2: make([]float32, OutputSize*HiddenSize),
		b2: make([]float32, OutputSize),
	}
	// He-style uniform init keeps activations in a sane range so the softmax
	// is neither flat nor saturated for inputs in [0,1].
	fill(r, m.w1, math.Sqrt(6.0/InputSize))
	fill(r, m.b1, 0.1)
	fill(r, m.w2, math.Sqrt(6.0/HiddenSize))
	fill(r, m.b2, 0.1)
	return m
}

func fill(r *rand.Rand, dst []float32, limit float64) {
	for i := range dst {
		dst[i] = float32((r.Float64()*2 - 1) * limit)
	}
}

// Infer runs the network on batch rows of x (batch×InputSize, row-major) and
// returns batch×OutputSize probabilities. It panics if len(x) does not match
// batch: callers validate shapes at their own boundary.
func (m *MLP) Infer(x []float32, batch int) []float32 {
	if batch < 0 || len(x) != batch*InputSize {
		panic(fmt.Sprintf("model: input has %d values, want %d×%d", len(x), batch, InputSize))
	}
	out := make([]float32, batch*OutputSize)
	hidden := make([]float32, HiddenSize)
	for b := range batch {
		m.row(x[b*InputSize:(b+1)*InputSize], hidden, out[b*OutputSize:(b+1)*OutputSize])
	}
	return out
}

// row computes one sample; hidden is scratch space.
func (m *MLP) row(x, hidden, out []float32) {
	for j := range HiddenSize {
		w := m.w1[j*InputSize : (j+1)*InputSize]
		s := m.b1[j]
		for i, v := range x {
			s += w[i] * v
		}
		hidden[j] = max(s, 0)
	}
	for k := range OutputSize {
		w := m.w2[k*HiddenSize : (k+1)*HiddenSize]
		s := m.b2[k]
		for j, h := range hidden {
			s += w[j] * h
		}
		out[k] = s
	}
	softmax(out)
}

// softmax turns logits into probabilities in place, subtracting the maximum
// first so large logits cannot overflow exp.
func softmax(v []float32) {
	hi := v[0]
	for _, x := range v[1:] {
		hi = max(hi, x)
	}
	var sum float64
	for i, x := range v {
		e := math.Exp(float64(x - hi))
		v[i] = float32(e)
		sum += e
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / sum)
	}
}
