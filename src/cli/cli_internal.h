/* The library internals the amp command uses: the only header of src/ outside
 * src/cli/ that a CLI file includes (tests/test_exports.c checks it). Every
 * other line of the CLI is written on the public API (include/amp/), as a
 * program of a user's would be; these few are the tool reaching inside the
 * library it ships with, which is why the CLI links the internal library
 * (amp_internal: libamp.a with src/ on the include path, CMakeLists.txt) and
 * not libamp.so, which exports the public API only.
 *
 *   core/error.h           amp_error, amp_error_null: the trainers set the
 *                          thread's error in the library's own form ("amp
 *                          train: --resume DIR: ...") so that one message
 *                          path (amp_last_error) reports library and trainer
 *                          failures alike
 *   core/hash128.h         amp__hash128: the data parallel trainer identifies
 *                          the Fashion-MNIST arrays it loaded by their digest
 *                          (ranks agree on it without reading files again)
 *   core/checked.h         amp_ck_*: the trainers' size
 *                          arithmetic uses the library's checked helpers
 *   core/threads.h         amp__threads_stats, amp__threads_stats_reset:
 *                          `amp bench load` and `amp compare` report how the
 *                          adaptive thread count behaved during a run
 *   dist/dist_impl.h       amp__dist_launched (`amp train`: started by mpirun?),
 *                          amp__dist_agree (the data parallel trainer checks
 *                          that every rank has the same options and data)
 *   io/safetensors_impl.h  amp__st_peek_meta: the data parallel trainer reads
 *                          two metadata keys of a checkpoint without loading it
 *   kernels/cpu_paths.h    amp_gemm, amp_gemm_kernel_*: `amp bench gemm` and
 *                          `amp bench precision` time the CPU GEMM kernels of
 *                          each path directly, below the op (the one door
 *                          to kernels/cpu/ from outside src/kernels/);
 *                          amp_k_quant_path, amp_k_quant_set_vnni: `amp bench
 *                          quant` times the quantized linear per kernel set
 *   kernels/backend.h,     amp__backend and the GEMM entry, device tensors:
 *   tensor/tensor_impl.h   `amp bench precision --device cuda` times the CUDA
 *                          backend's GEMM below the op
 *   amp/op_table.h         amp__op_table, amp_autocast_write_docs: `amp
 *                          autocast` prints the op table and writes
 *                          docs/autocast.md from it
 *
 * A new use belongs here, with its reason; a use that a user's program would
 * want too belongs in include/amp/ instead. */
#ifndef AMP_CLI_INTERNAL_H
#define AMP_CLI_INTERNAL_H

#include "amp/op_table.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/hash128.h"
#include "core/threads.h"
#include "dist/dist_impl.h"
#include "io/safetensors_impl.h"
#include "kernels/backend.h"
#include "kernels/cpu_paths.h"
#include "tensor/tensor_impl.h"

#endif
