#pragma once
// The CUDA backend's kernels: the same functions, arguments and semantics as kernels::cpu in
// kernels/kernels.h (read the math there), plus the stream they are enqueued on. Pointers are
// device pointers; every call is asynchronous on `stream` (the emulator runs it at once).
// Implemented by kernels/cuda/*.cu, compiled by nvcc (normal build) or as C++ on the SIMT emulator
// (kernels/emu, the emulated build). Present only when the build has a CUDA backend.
#include <cstdint>

#include "kernels/kernels.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*, in the CUDA runtime and in the emulator alike

namespace hg::kernels::cuda {

using Stream = CUstream_st*;

// ---- memory and layout ----
void fill(void* y, int64_t n, double value, DType dtype, Stream stream);
void cast(const void* x, DType x_dtype, void* y, DType y_dtype, int64_t n, Stream stream);
void copy_strided(const void* src, const int64_t* src_strides, void* dst, const int64_t* dst_strides,
                  const int64_t* shape, int rank, DType dtype, Stream stream);  // strides/shape: host arrays

// ---- elementwise ----
void unary_forward(UnaryOp op, const void* x, void* y, int64_t n, double scalar, DType dtype, Stream stream);
void unary_backward(UnaryOp op, const void* x, const void* y, const void* dy, void* dx, int64_t n, double scalar,
                    DType dtype, Stream stream);
void affine(const void* x, void* y, int64_t n, double alpha, double beta, DType dtype, Stream stream);
void binary_forward(BinaryOp op, const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
                    void* y, const int64_t* shape, int rank, DType dtype, Stream stream);  // host arrays

// ---- reductions ----
void reduce(ReduceOp op, const void* x, void* y, int64_t* argmax, int64_t outer, int64_t n, int64_t inner,
            double scale, DType dtype, Stream stream);
void scatter_along(const void* x, const int64_t* index, void* y, int64_t outer, int64_t n, int64_t inner,
                   DType dtype, Stream stream);

// ---- rows: softmax, cross entropy, LayerNorm ----
void softmax_forward(const void* x, void* y, int64_t rows, int64_t cols, bool log, int64_t causal_rows,
                     DType dtype, Stream stream);
void softmax_backward(const void* y, const void* dy, void* dx, int64_t rows, int64_t cols, bool log, DType dtype,
                      Stream stream);
// Returns the number of non-ignored rows (reads the targets back: synchronises the stream). An
// out-of-range target is reported as hg::Error naming the row after the kernel (the kernel flags it).
int64_t cross_entropy_forward(const void* logits, const void* targets, DType index_dtype, void* loss, void* lse,
                              int64_t rows, int64_t cols, int64_t ignore_index, DType dtype, Stream stream);
void cross_entropy_backward(const void* logits, const void* targets, DType index_dtype, const void* lse,
                            const void* dloss, void* dlogits, int64_t rows, int64_t cols, int64_t ignore_index,
                            DType dtype, Stream stream);
void layer_norm_forward(const void* x, const void* weight, const void* bias, void* y, void* mean, void* rstd,
                        int64_t rows, int64_t cols, double eps, DType dtype, Stream stream);
void layer_norm_backward(const void* x, const void* weight, const void* mean, const void* rstd, const void* dy,
                         void* dx, void* dweight, void* dbias, int64_t rows, int64_t cols, DType dtype, Stream stream);

// ---- embedding, dropout, random ----
// An out-of-range id is reported as hg::Error after the kernel (synchronises the stream).
void embedding_forward(const void* weight, const void* ids, DType index_dtype, void* y, int64_t n_ids, int64_t vocab,
                       int64_t dim, DType dtype, Stream stream);
void embedding_backward(const void* dy, const void* ids, DType index_dtype, void* dweight, int64_t n_ids,
                        int64_t vocab, int64_t dim, DType dtype, Stream stream);
void dropout_forward(const void* x, void* y, int64_t n, double p, uint64_t seed, uint64_t offset, DType dtype,
                     Stream stream);
void dropout_backward(const void* dy, void* dx, int64_t n, double p, uint64_t seed, uint64_t offset, DType dtype,
                      Stream stream);
void uniform_fill(void* y, int64_t n, double low, double high, uint64_t seed, uint64_t offset, DType dtype,
                  Stream stream);
void normal_fill(void* y, int64_t n, double mean, double std, uint64_t seed, uint64_t offset, DType dtype,
                 Stream stream);

void stochastic_round(const float* x, void* y, int64_t n, uint64_t seed, uint64_t offset, DType dtype, Stream stream);

// ---- optimizers ----
void adamw_step(void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n, double lr,
                double beta1, double beta2, double eps, double weight_decay, int64_t step, DType dtype, Stream stream);
// Synchronises the stream to return the value.
double sum_of_squares(const void* x, int64_t n, DType dtype, Stream stream);
// One launch over every tensor (`tensors` is a host array of device spans); synchronises the stream
// to return found_inf.
bool unscale_and_check(const TensorSpan* tensors, int64_t count, double inv_scale, Stream stream);

// ---- GEMM (cuBLASLt on a GPU; the CPU backend on the emulator) ----
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType dtype, Stream stream);
// cuBLASLt's bias epilogue (CUBLASLT_EPILOGUE_BIAS): the bias is added before C is stored.
void gemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
               int64_t lda, const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc, DType dtype,
               Stream stream);

// ---- convolution and pooling (kernels/conv2d.cu: cuDNN on a GPU when built with it, else
// im2col + GEMM; kernels/pool2d.cu) ----
// The workspace size depends on the path and, with cuDNN, on the algorithm chosen for the shape
// (cached per shape): ask for it with the same geometry and dtype before each call.
size_t conv2d_workspace_bytes(const Conv2dGeometry& g, ConvPass pass, DType dtype, Stream stream);
void conv2d_forward(const Conv2dGeometry& g, const void* x, const void* weight, const void* bias, void* y,
                    void* workspace, size_t workspace_bytes, DType dtype, Stream stream);
void conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* weight, void* dx, void* workspace,
                          size_t workspace_bytes, DType dtype, Stream stream);
void conv2d_backward_filter(const Conv2dGeometry& g, const void* x, const void* dy, void* dweight, void* workspace,
                            size_t workspace_bytes, DType dtype, Stream stream);
void pool2d_forward(PoolMode mode, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax, DType dtype,
                    Stream stream);
void pool2d_backward(PoolMode mode, const Pool2dGeometry& g, const void* dy, const int32_t* argmax, void* dx,
                     DType dtype, Stream stream);

}  // namespace hg::kernels::cuda
