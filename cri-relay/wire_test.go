package main

import (
	"bytes"
	"testing"
)

func bytesField(number uint64, value string) []byte {
	b := appendUvarint(nil, number<<3|wireBytes)
	b = appendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

func varintField(number, value uint64) []byte {
	return appendUvarint(appendUvarint(nil, number<<3|wireVarint), value)
}

func testImage(id string, pinned bool, names ...string) string {
	b := bytesField(fieldID, id)
	for _, name := range names {
		b = append(b, bytesField(fieldRepoTags, name)...)
	}
	b = append(b, varintField(4, 837)...) // size
	if pinned {
		b = append(b, varintField(fieldPinned, 1)...)
	}
	return string(b)
}

func listing(images ...string) []byte {
	var b []byte
	for _, img := range images {
		b = append(b, bytesField(fieldImages, img)...)
	}
	return b
}

func keys(ids, known, names []string) *pinKeys {
	return newPinKeys(ids, known, names)
}

func pinnedByID(t *testing.T, answer []byte) map[string]bool {
	t.Helper()
	found := map[string]bool{}
	err := fields(answer, func(f field) {
		if f.number == fieldImages {
			img, err := readImage(f.payload)
			if err != nil {
				t.Fatal(err)
			}
			found[string(img.id)] = img.pinned
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestPinsAreAddedByIDAndNeverRemoved(t *testing.T) {
	answer := listing(testImage("sha256:a", false, "a:1"), testImage("sha256:b", true, "b:1"),
		testImage("sha256:c", false, "c:1"))
	out, marked, err := markPinned(answer, keys([]string{"sha256:a"}, []string{"sha256:a", "sha256:c"}, nil))
	if err != nil || marked != 1 {
		t.Fatalf("marked %d, err %v", marked, err)
	}
	want := map[string]bool{"sha256:a": true, "sha256:b": true, "sha256:c": false}
	if got := pinnedByID(t, out); len(got) != 3 || got["sha256:a"] != want["sha256:a"] ||
		got["sha256:b"] != want["sha256:b"] || got["sha256:c"] != want["sha256:c"] {
		t.Fatalf("pinned %v, want %v", got, want)
	}
	// Every byte of the images left alone is as it was.
	if !bytes.Contains(out, []byte(testImage("sha256:b", true, "b:1"))) ||
		!bytes.Contains(out, []byte(testImage("sha256:c", false, "c:1"))) {
		t.Fatal("an image that was not pinned changed")
	}
}

func TestAnUnknownIDIsMatchedByName(t *testing.T) {
	answer := listing(testImage("sha256:other", false, "a:1"), testImage("sha256:known", false, "a:1"))
	out, marked, err := markPinned(answer, keys(nil, []string{"sha256:known"}, []string{"a:1"}))
	if err != nil || marked != 1 {
		t.Fatalf("marked %d, err %v", marked, err)
	}
	if got := pinnedByID(t, out); !got["sha256:other"] || got["sha256:known"] {
		t.Fatalf("pinned %v", got)
	}
}

func TestNothingToPinGivesTheSameBytes(t *testing.T) {
	answer := listing(testImage("sha256:a", false, "a:1"))
	out, marked, err := markPinned(answer, keys([]string{"sha256:z"}, []string{"sha256:a"}, nil))
	if err != nil || marked != 0 || &out[0] != &answer[0] {
		t.Fatalf("marked %d, err %v, same slice %v", marked, err, &out[0] == &answer[0])
	}
}

func TestImageStatusKeepsItsInfo(t *testing.T) {
	info := bytesField(2, string(append(bytesField(1, "info"), bytesField(2, "{}")...)))
	answer := append(bytesField(fieldImages, testImage("sha256:a", false)), info...)
	out, marked, err := markPinned(answer, keys([]string{"sha256:a"}, nil, nil))
	if err != nil || marked != 1 || !bytes.HasSuffix(out, info) || !pinnedByID(t, out)["sha256:a"] {
		t.Fatalf("marked %d, err %v, out %x", marked, err, out)
	}
}

func TestAnswersThatCannotBeReadPassThrough(t *testing.T) {
	whole := listing(testImage("sha256:a", false))
	for cut := 1; cut < len(whole); cut++ {
		answer := whole[:cut]
		out, marked, err := markPinned(answer, keys([]string{"sha256:a"}, nil, nil))
		if err == nil && marked != 0 {
			t.Fatalf("cut at %d: marked %d without an error", cut, marked)
		}
		if marked == 0 && !bytes.Equal(out, answer) {
			t.Fatalf("cut at %d: changed an answer it did not mark", cut)
		}
	}
}

func TestLongVarintsAndWideImages(t *testing.T) {
	long := testImage("sha256:a", false, string(bytes.Repeat([]byte("n"), 300)))
	out, marked, err := markPinned(listing(long), keys([]string{"sha256:a"}, nil, nil))
	if err != nil || marked != 1 || !pinnedByID(t, out)["sha256:a"] {
		t.Fatalf("marked %d, err %v", marked, err)
	}
}
