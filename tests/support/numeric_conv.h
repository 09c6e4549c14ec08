/* amp's scalar conversions with uniform types (bit patterns as uint32_t),
 * for the numeric tests' tables of formats. */
#ifndef AMP_TEST_NUMERIC_CONV_H
#define AMP_TEST_NUMERIC_CONV_H

#include <stdint.h>

#include "amp/numeric.h"

static inline float nc_f16_to(uint32_t b) { return amp_f16_to_f32((uint16_t)b); }
static inline float nc_bf16_to(uint32_t b) { return amp_bf16_to_f32((uint16_t)b); }
static inline float nc_e4m3_to(uint32_t b) { return amp_e4m3_to_f32((uint8_t)b); }
static inline float nc_e5m2_to(uint32_t b) { return amp_e5m2_to_f32((uint8_t)b); }
static inline uint32_t nc_f16_from(float x) { return amp_f32_to_f16(x); }
static inline uint32_t nc_bf16_from(float x) { return amp_f32_to_bf16(x); }
static inline uint32_t nc_e4m3_from(float x) { return amp_f32_to_e4m3(x); }
static inline uint32_t nc_e5m2_from(float x) { return amp_f32_to_e5m2(x); }
static inline uint32_t nc_e4m3_from_sat(float x) { return amp_f32_to_e4m3_sat(x); }
static inline uint32_t nc_e5m2_from_sat(float x) { return amp_f32_to_e5m2_sat(x); }
static inline uint32_t nc_f16_from64(double x) { return amp_f64_to_f16(x); }
static inline uint32_t nc_bf16_from64(double x) { return amp_f64_to_bf16(x); }

#endif
