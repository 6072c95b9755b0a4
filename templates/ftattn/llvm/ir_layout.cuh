// Offsets of the kernel-parameter fields that the LLVM route's IR passes read (the fault plan)
// and write (the fault log). Included last by the LLVM route only; the passes read this table
// and delete it, so the layout comes from params.cuh itself and cannot drift.
#pragma once

#include "ftattn/params.cuh"

extern "C" __device__ __attribute__((used)) const int ftattn_ir_params_layout[] = {
    __builtin_offsetof(ftattn::AttentionParams, fault_log),
    __builtin_offsetof(ftattn::AttentionParams, fault.site),
    __builtin_offsetof(ftattn::AttentionParams, fault.cta),
    __builtin_offsetof(ftattn::AttentionParams, fault.thread),
    __builtin_offsetof(ftattn::AttentionParams, fault.iteration),
    __builtin_offsetof(ftattn::AttentionParams, fault.element),
    __builtin_offsetof(ftattn::AttentionParams, fault.bit),
    __builtin_offsetof(ftattn::FaultLog, detected),
    ftattn::fault_site_ir,
};
