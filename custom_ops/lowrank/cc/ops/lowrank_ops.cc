// Registration of the low-rank residual, product, compensate and project ops: signatures and shape functions.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfcomp {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

// Merges two dimensions that must agree; the error says which.
Status MergeDim(InferenceContext* c, DimensionHandle a, DimensionHandle b, const char* what,
                DimensionHandle* out) {
  const Status s = c->Merge(a, b, out);
  if (s.ok()) return s;
  return ::tensorflow::errors::InvalidArgument(what, ": ", s.message());
}

Status WithMatrix(InferenceContext* c, int input, const char* what, ShapeHandle* out) {
  const Status s = c->WithRank(c->input(input), 2, out);
  if (s.ok()) return s;
  return ::tensorflow::errors::InvalidArgument(what, " (rank 2): ", s.message());
}

}  // namespace

REGISTER_OP("TfcompLowRankResidual")
    .Input("m: T")
    .Input("p: T")
    .Input("q: T")
    .Output("residual: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle m, p, q;
      TF_RETURN_IF_ERROR(WithMatrix(c, 0, "m must be a matrix [n, k]", &m));
      TF_RETURN_IF_ERROR(WithMatrix(c, 1, "p must be a matrix [n, r]", &p));
      TF_RETURN_IF_ERROR(WithMatrix(c, 2, "q must be a matrix [k, r]", &q));
      DimensionHandle n, k, r;
      TF_RETURN_IF_ERROR(MergeDim(c, c->Dim(m, 0), c->Dim(p, 0),
                                  "p must have one row per row of m", &n));
      TF_RETURN_IF_ERROR(MergeDim(c, c->Dim(m, 1), c->Dim(q, 0),
                                  "q must have one row per column of m", &k));
      TF_RETURN_IF_ERROR(MergeDim(c, c->Dim(p, 1), c->Dim(q, 1),
                                  "p and q must have the same number of columns (the rank r)",
                                  &r));
      c->set_output(0, c->Matrix(n, k));
      return Status();
    })
    .Doc(R"doc(
The error-feedback update of low-rank compression (PowerSGD, ACP-SGD):
residual = m - p q^T for m [n, k], p [n, r], q [k, r], in one pass over m.
Element (i, c) starts at m[i, c] and takes fma(-p[i, j], q[c, j], .) for
j = 0 .. r-1 in order (in float for half and bfloat16), so every device and
thread count gives the same bits.
)doc");

REGISTER_OP("TfcompLowRankProduct")
    .Input("p: T")
    .Input("q: T")
    .Output("product: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle p, q;
      TF_RETURN_IF_ERROR(WithMatrix(c, 0, "p must be a matrix [n, r]", &p));
      TF_RETURN_IF_ERROR(WithMatrix(c, 1, "q must be a matrix [k, r]", &q));
      DimensionHandle r;
      TF_RETURN_IF_ERROR(MergeDim(c, c->Dim(p, 1), c->Dim(q, 1),
                                  "p and q must have the same number of columns (the rank r)",
                                  &r));
      c->set_output(0, c->Matrix(c->Dim(p, 0), c->Dim(q, 0)));
      return Status();
    })
    .Doc(R"doc(
The estimate of low-rank compression (PowerSGD, ACP-SGD): product = p q^T for
p [n, r], q [k, r], written once. Element (i, c) starts at +0 and takes
fma(p[i, j], q[c, j], .) for j = 0 .. r-1 in order (in float for half and
bfloat16), so every device and thread count gives the same bits.
)doc");

REGISTER_OP("TfcompLowRankCompensate")
    .Input("g: T")
    .Input("e: T")
    .Input("q: T")
    .Output("m: T")
    .Output("p: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle g, e, q;
      TF_RETURN_IF_ERROR(WithMatrix(c, 0, "g must be a matrix [n, k]", &g));
      TF_RETURN_IF_ERROR(WithMatrix(c, 2, "q must be a matrix [k, r]", &q));
      const Status same = c->Merge(g, c->input(1), &e);
      if (!same.ok()) {
        return ::tensorflow::errors::InvalidArgument("e must have g's shape: ", same.message());
      }
      DimensionHandle k;
      TF_RETURN_IF_ERROR(MergeDim(c, c->Dim(e, 1), c->Dim(q, 0),
                                  "q must have one row per column of g", &k));
      c->set_output(0, c->Matrix(c->Dim(e, 0), k));
      c->set_output(1, c->Matrix(c->Dim(e, 0), c->Dim(q, 1)));
      return Status();
    })
    .Doc(R"doc(
The first pass of low-rank compression's encode (PowerSGD's P = M Q, ACP-SGD's
even steps): the compensated gradient m = g + e (the gradient and the
error-feedback residual, [n, k]) written once, and p = m q for q [k, r], in the
same pass over g and e. Each p[i, j] sums its k products in 16 lanes (lane l
takes columns l, l + 16, ... by fused multiply-add from +0, the columns padded
with zeros to a multiple of 16), then adds the lanes pairwise (halves,
quarters, eighths, the last two), in float for half and bfloat16, so every
device and thread count gives the same bits.
)doc");

REGISTER_OP("TfcompLowRankProject")
    .Input("m: T")
    .Input("p: T")
    .Output("q: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle m, p;
      TF_RETURN_IF_ERROR(WithMatrix(c, 0, "m must be a matrix [n, k]", &m));
      TF_RETURN_IF_ERROR(WithMatrix(c, 1, "p must be a matrix [n, r]", &p));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(MergeDim(c, c->Dim(m, 0), c->Dim(p, 0),
                                  "p must have one row per row of m", &n));
      c->set_output(0, c->Matrix(c->Dim(m, 1), c->Dim(p, 1)));
      return Status();
    })
    .Doc(R"doc(
The other factor of low-rank compression (PowerSGD's Q = M^T P, ACP-SGD's odd
steps): q = m^T p for m [n, k] and p [n, r], in one pass over m. The rows are
cut into blocks of 256; each block's sum starts at +0 and takes
fma(m[i, c], p[i, j], .) for its rows in order, and the blocks' sums are added
in block order (in float for half and bfloat16), so every device and thread
count gives the same bits.
)doc");

}  // namespace tfcomp
