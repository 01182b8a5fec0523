package redis

import "strings"

// HashSlot returns the Redis Cluster hash slot of a Redis key: CRC16 (XMODEM)
// of the key, or of its hash tag (the text between the first '{' and the
// next '}', when not empty), modulo 16384.
func HashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
