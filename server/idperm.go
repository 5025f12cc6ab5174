package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
)

// Ids handed to clients come from a counter (the clock's, or the shared
// IDSource's blocks), which is unique without a lookup on a front's
// replicas; handed out as it is, a client's consecutive ids would tell
// how many tasks the other clients submitted in between. idPerm hands out
// a keyed permutation of the counter instead: unique as the counter is,
// yet as good as random to a client without the key. Random ids would
// need a store lookup on every submit to stay unique; this needs none.
//
// The permutation is a Feistel network over idBits bits (two halves of
// 26 bits, AES-128 as the round function); ids are 2^52 plus it, so they
// are numeric, 16 digits, never 0, never start with 0, and stay below
// 2^53, which a JavaScript client reads exactly (createTask's taskId is a
// JSON number).
const (
	idBits   = 52
	idHalf   = idBits / 2
	idMask   = 1<<idHalf - 1
	idBase   = uint64(1) << idBits
	idRounds = 6
	// IDKeySize is the length of an IDSource's key.
	IDKeySize = 16
)

// idPerm is a keyed permutation of [0, 2^52).
type idPerm struct{ block cipher.Block }

// newIDPerm keys a permutation with an IDSource's key.
func newIDPerm(key []byte) (*idPerm, error) {
	if len(key) != IDKeySize {
		return nil, fmt.Errorf("the id source's key has %d bytes, want %d", len(key), IDKeySize)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return &idPerm{block: b}, nil
}

// randomIDPerm is a permutation under a key of its own, for a server
// whose ids no other process hands out.
func randomIDPerm() *idPerm {
	key := make([]byte, IDKeySize)
	rand.Read(key) // never fails (crypto/rand)
	p, _ := newIDPerm(key)
	return p
}

// round is the Feistel round function of round i on half r.
func (p *idPerm) round(i int, r uint64) uint64 {
	var in, out [aes.BlockSize]byte
	in[0] = byte(i)
	binary.BigEndian.PutUint64(in[8:], r)
	p.block.Encrypt(out[:], in[:])
	return binary.BigEndian.Uint64(out[:8]) & idMask
}

// id is counter n's id: 2^52 plus the permutation of n's low 52 bits (a
// counter reaches 2^52 in the year 2112 at the clock's microseconds).
func (p *idPerm) id(n uint64) uint64 {
	l, r := (n>>idHalf)&idMask, n&idMask
	for i := range idRounds {
		l, r = r, l^p.round(i, r)
	}
	return idBase | l<<idHalf | r
}

// counter is the inverse of id: the counter whose id is id; false for a
// number that is no id.
func (p *idPerm) counter(id uint64) (uint64, bool) {
	if id>>idBits != 1 {
		return 0, false
	}
	l, r := (id>>idHalf)&idMask, id&idMask
	for i := idRounds - 1; i >= 0; i-- {
		l, r = r^p.round(i, l), l
	}
	return l<<idHalf | r, true
}
