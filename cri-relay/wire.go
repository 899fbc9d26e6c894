package main

// The one change the relay makes to an answer: pinned=true (runtime.v1 Image field 8) on the
// images pinctl wants kept, in ListImagesResponse (images = 1) and ImageStatusResponse
// (image = 1). Each Image is read field by field and, when it is to be pinned, field 8 is
// appended to it: a reader takes the last value of a field, so every other byte stays as the
// runtime wrote it, unknown fields included.

import (
	"errors"
	"fmt"
)

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5

	fieldImages   = 1 // ListImagesResponse.images, ImageStatusResponse.image
	fieldID       = 1 // Image.id
	fieldRepoTags = 2 // Image.repo_tags
	fieldDigests  = 3 // Image.repo_digests
	fieldPinned   = 8 // Image.pinned
)

var pinnedTrue = []byte{fieldPinned<<3 | wireVarint, 1}

var errTruncated = errors.New("truncated protobuf message")

// uvarint reads a base-128 varint at b[i:], returning its value and the index after it.
func uvarint(b []byte, i int) (uint64, int, error) {
	var value uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if i >= len(b) {
			return 0, 0, errTruncated
		}
		c := b[i]
		i++
		value |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return value, i, nil
		}
	}
	return 0, 0, errors.New("varint longer than 64 bits")
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// field is one field of a message: its number, wire type, the bytes of a length-delimited
// value, the value of a varint, and where the whole field (tag included) starts and ends.
type field struct {
	number     uint64
	wireType   uint64
	payload    []byte
	varint     uint64
	start, end int
}

// fieldReader reads the fields of a message one by one: next returns false at the end or at
// the first malformed field, and err then says which.
type fieldReader struct {
	msg []byte
	pos int
	err error
}

func (r *fieldReader) next() (field, bool) {
	if r.err != nil || r.pos >= len(r.msg) {
		return field{}, false
	}
	msg, start := r.msg, r.pos
	tag, next, err := uvarint(msg, start)
	f := field{number: tag >> 3, wireType: tag & 7, start: start}
	if err == nil {
		switch f.wireType {
		case wireVarint:
			f.varint, next, err = uvarint(msg, next)
		case wireFixed64:
			next += 8
		case wireFixed32:
			next += 4
		case wireBytes:
			var size uint64
			size, next, err = uvarint(msg, next)
			if err == nil && size > uint64(len(msg)-next) {
				err = errTruncated
			}
			if err == nil {
				f.payload = msg[next : next+int(size)]
				next += int(size)
			}
		default:
			err = fmt.Errorf("wire type %d is not used by runtime.v1", f.wireType)
		}
	}
	if err == nil && next > len(msg) {
		err = errTruncated
	}
	if err != nil {
		r.err = err
		return field{}, false
	}
	f.end, r.pos = next, next
	return f, true
}

// fields calls visit for each field of msg, in order.
func fields(msg []byte, visit func(f field)) error {
	r := fieldReader{msg: msg}
	for f, ok := r.next(); ok; f, ok = r.next() {
		visit(f)
	}
	return r.err
}

// image is what decides whether an Image is to be reported pinned. Its id aliases the answer:
// looking it up as string(id) in a map does not copy it.
type image struct {
	id     []byte
	pinned bool
	msg    []byte
}

func readImage(msg []byte) (image, error) {
	img := image{msg: msg}
	err := fields(msg, func(f field) {
		switch {
		case f.number == fieldID && f.wireType == wireBytes:
			img.id = f.payload
		case f.number == fieldPinned && f.wireType == wireVarint:
			img.pinned = f.varint != 0
		}
	})
	return img, err
}

// wanted says whether pinctl wants img kept: by its ID when pinctl has rows for it, else by
// one of its tags or digests (as pinctl's check joins CRI images with its rows).
func (k *pinKeys) wanted(img image) bool {
	if wanted, known := k.wantedByID[string(img.id)]; known || len(k.names) == 0 {
		return wanted
	}
	named := false
	_ = fields(img.msg, func(f field) { // readImage has read it whole: no error here
		if (f.number == fieldRepoTags || f.number == fieldDigests) && f.wireType == wireBytes {
			if _, ok := k.names[string(f.payload)]; ok {
				named = true
			}
		}
	})
	return named
}

// toPin says whether pinned=true is to be added to the Image msg. Encoders write the id
// (field 1) first: most images are passed over on it, without reading the rest.
func (k *pinKeys) toPin(msg []byte) (bool, error) {
	if len(msg) > 1 && msg[0] == fieldID<<3|wireBytes {
		size, next, err := uvarint(msg, 1)
		if err == nil && size <= uint64(len(msg)-next) {
			// No copy: a conversion in the index expression.
			if wanted, known := k.wantedByID[string(msg[next:next+int(size)])]; !wanted && (known || len(k.names) == 0) {
				return false, nil
			}
		}
	}
	img, err := readImage(msg)
	if err != nil {
		return false, err
	}
	return !img.pinned && k.wanted(img), nil
}

// markPinned returns the answer with pins added and how many images it pinned; the very
// same slice when it pins none.
func markPinned(answer []byte, keys *pinKeys) ([]byte, int, error) {
	var out []byte
	copied, marked := 0, 0
	r := fieldReader{msg: answer}
	for f, ok := r.next(); ok; f, ok = r.next() {
		if f.number != fieldImages || f.wireType != wireBytes {
			continue
		}
		pin, err := keys.toPin(f.payload)
		if err != nil {
			return answer, 0, err
		}
		if !pin {
			continue
		}
		if out == nil { // room for a few bytes more per image: no growing on the way
			out = make([]byte, 0, len(answer)+len(answer)/16+16)
		}
		out = append(out, answer[copied:f.start]...)
		out = appendUvarint(out, fieldImages<<3|wireBytes)
		out = appendUvarint(out, uint64(len(f.payload)+len(pinnedTrue)))
		out = append(out, f.payload...)
		out = append(out, pinnedTrue...)
		copied = f.end
		marked++
	}
	if r.err != nil || marked == 0 {
		return answer, 0, r.err
	}
	return append(out, answer[copied:]...), marked, nil
}
