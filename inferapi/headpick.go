package inferapi

import "google.golang.org/protobuf/encoding/protowire"

// pickKeep bounds what a picked field keeps of its contents: one byte more
// than an id is kept to, so that an id clipped here clips as the whole one.
const pickKeep = maxID + 1

// fieldPick keeps, as a message streams by, the top-level fields whose
// numbers are in want, each re-encoded with its contents clipped to
// pickKeep bytes, and passes over the others without holding them: a
// per-message field behind a large one (TorchServe's sequenceId, which
// follows the request's input) is then read whatever the message's size.
type fieldPick struct {
	want    uint64 // bit n: keep field n (n < 64)
	max     int    // bound on out
	out     []byte
	state   pickState
	v       uint64 // varint being read
	vbytes  uint8
	keep    bool  // the current field is kept
	skipped bool  // a field was left out for max
	left    int64 // bytes of the current value still to come
	copyN   int64 // of which are kept
}

type pickState uint8

const (
	pTag pickState = iota
	pVarint
	pLength
	pValue // length-delimited contents or a fixed-size value
	pBroken
)

func (p *fieldPick) reset() {
	*p = fieldPick{want: p.want, max: p.max, out: p.out[:0]}
}

// feed reads the next bytes of the message.
func (p *fieldPick) feed(b []byte) {
	for len(b) > 0 && p.state != pBroken {
		if p.state == pValue {
			n := min(p.left, int64(len(b)))
			if c := min(n, p.copyN); c > 0 {
				p.out = append(p.out, b[:c]...)
				p.copyN -= c
			}
			p.left -= n
			b = b[n:]
			if p.left == 0 {
				p.state = pTag
			}
			continue
		}
		c := b[0]
		b = b[1:]
		if p.state == pVarint && p.keep {
			p.out = append(p.out, c)
		}
		if p.vbytes == 10 {
			p.state = pBroken // a varint is at most 10 bytes
			return
		}
		p.v |= uint64(c&0x7f) << (7 * p.vbytes)
		p.vbytes++
		if c >= 0x80 {
			continue
		}
		v := p.v
		p.v, p.vbytes = 0, 0
		switch p.state {
		case pTag:
			p.tag(v)
		case pVarint:
			p.state = pTag
		case pLength:
			if v > 1<<62 {
				p.state = pBroken
				return
			}
			p.left, p.state = int64(v), pValue
			if p.keep {
				p.copyN = min(p.left, pickKeep)
				p.out = protowire.AppendVarint(p.out, uint64(p.copyN))
			}
			if p.left == 0 {
				p.state = pTag
			}
		}
	}
}

// tag starts the field whose tag is v.
func (p *fieldPick) tag(v uint64) {
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		p.state = pBroken
		return
	}
	p.keep = num < 64 && p.want&(1<<num) != 0
	if p.keep && len(p.out)+2*varintMax+pickKeep > p.max {
		p.keep, p.skipped = false, true
	}
	if p.keep {
		p.out = protowire.AppendTag(p.out, num, typ)
	}
	switch typ {
	case protowire.VarintType:
		p.state = pVarint
	case protowire.BytesType:
		p.state = pLength
	case protowire.Fixed32Type, protowire.Fixed64Type:
		p.left, p.state = 4, pValue
		if typ == protowire.Fixed64Type {
			p.left = 8
		}
		p.copyN = 0
		if p.keep {
			p.copyN = p.left
		}
	default:
		p.state = pBroken // groups: no API this reads sends them
	}
}

// varintMax is the most bytes a varint takes.
const varintMax = 10

// HeadFields is Heads, but what fn is given of each message is its
// top-level fields numbered in fields (bit n for field n), in their order,
// each with its contents clipped to 129 bytes, up to max bytes in all; the
// other fields are passed over, however large. whole reports that the
// message parsed to its end and nothing was left out for max. Reset clears
// the request.
func (s *GRPCScanner) HeadFields(fields uint64, max int, fn func(head []byte, whole bool)) {
	s.headMax, s.headFn = max, fn
	s.pick = &fieldPick{want: fields, max: max}
}
