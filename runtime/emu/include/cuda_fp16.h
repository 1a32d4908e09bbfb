// The emulated build's half-precision subset: IEEE binary16 bits and their exact conversion to float.
#pragma once
#include <cstdint>
#include <cstring>

#include "mk_emu/device.hpp"

struct __half {
    uint16_t bits;
};
struct alignas(4) __half2 {
    __half x, y;
};

inline float __half2float(__half h) {
    const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu;
    uint32_t f;
    if (exp == 0x1f) {
        f = sign | 0x7f800000u | man << 13;
    } else if (exp != 0) {
        f = sign | (exp + 112) << 23 | man << 13;
    } else if (man == 0) {
        f = sign;
    } else {  // subnormal: normalize
        int e = -1;
        uint32_t m = man;
        do {
            ++e;
            m <<= 1;
        } while ((m & 0x400u) == 0);
        f = sign | uint32_t(112 - e) << 23 | (m & 0x3ffu) << 13;
    }
    float out;
    std::memcpy(&out, &f, 4);
    return out;
}
inline __half __ushort_as_half(unsigned short v) { return __half{v}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
