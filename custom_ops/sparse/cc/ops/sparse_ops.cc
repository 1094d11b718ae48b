// Registration of the sparse ops: DRAGONN's hashed threshold selection and the
// batched sparse decode.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfcomp {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

// The seed input: an int64 vector of 2 elements (a known wrong shape fails here,
// when the graph is built; the kernels check the shape they are given).
Status WithSeed(InferenceContext* c, int input) {
  ShapeHandle seed;
  DimensionHandle unused;
  Status s = c->WithRank(c->input(input), 1, &seed);
  if (s.ok()) s = c->WithValue(c->Dim(seed, 0), 2, &unused);
  if (s.ok()) return s;
  return ::tensorflow::errors::InvalidArgument("seed must be an int64 vector of 2 elements: ",
                                               s.message());
}

}  // namespace

REGISTER_OP("TfcompHashSelect")
    .Input("g: T")
    .Input("threshold: T")
    .Input("seed: int64")
    .Output("values: T")
    .Output("indices: Tindex")
    .Attr("capacity: int >= 0")
    .Attr("bucket_size: int >= 1 = 1")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tindex: {int32, int64} = DT_INT32")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
      TF_RETURN_IF_ERROR(WithSeed(c, 2));
      int64_t capacity;
      TF_RETURN_IF_ERROR(c->GetAttr("capacity", &capacity));
      c->set_output(0, c->Vector(capacity));
      c->set_output(1, c->Vector(capacity));
      return Status();
    })
    .Doc(R"doc(
DRAGONN's hashed selection: every element of g (flattened) with |g| >= threshold
(or NaN) is written to bucket h(index) of the `capacity` slots cut into buckets
of `bucket_size` consecutive slots (the last may be shorter), h a universal hash
drawn from seed[0:2]; a bucket keeps the bucket_size largest magnitudes hashed
to it, largest first (float32(|g|), NaN above +Inf), ties to the larger index.
Empty slots hold index -1 and value 0. At most 2^32 elements.
)doc");

REGISTER_OP("TfcompSampledThreshold")
    .Input("g: T")
    .Input("seed: int64")
    .Output("threshold: T")
    .Attr("num_samples: int >= 1")
    .Attr("k: int >= 1")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(WithSeed(c, 1));
      c->set_output(0, c->Scalar());
      return Status();
    })
    .Doc(R"doc(
DGC's threshold: the k-th largest |g| among num_samples sampled elements (all of
g if it has no more), sampled in runs at hashed offsets drawn from seed[0:2];
NaN counts as +Inf. 0 for an empty g.
)doc");

REGISTER_OP("TfcompSparseDecode")
    .Input("values: T")
    .Input("indices: Tindex")
    .Input("n: int64")
    .Output("dense: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tindex: {int32, int64} = DT_INT32")
    .Attr("divisor: int >= 1 = 1")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle values, indices, unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &values));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &indices));
      const Status same_length = c->Merge(values, indices, &unused);
      if (!same_length.ok()) {
        return ::tensorflow::errors::InvalidArgument(
            "values and indices must be vectors of one length: ", same_length.message());
      }
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &unused));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(2, &n));
      c->set_output(0, c->Vector(n));
      return Status();
    })
    .Doc(R"doc(
Batched sparse decode: a dense vector of n zeros to which values[j] is added at
indices[j], in order, for every j with indices[j] >= 0 (-1 marks an empty slot).
Duplicate indices add up. With divisor K > 1 (K workers' mean) each element's
sum is then multiplied, once, by 1 / K in the accumulation type (float for
half, bfloat16 and float; double for double). Memory floor: the n outputs
written once and the (value, index) entries read, each a random
read-modify-write of an output element (the CPU kernel sorts the entries by
output chunk first: one more read and write of them).
)doc");

REGISTER_OP("TfcompScaleAt")
    .Input("x: T")
    .Input("indices: Tindex")
    .Input("factor: T")
    .Output("out: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tindex: {int32, int64} = DT_INT32")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &unused));
      c->set_output(0, c->input(0));
      return Status();
    })
    .Doc(R"doc(
x with its elements at indices (into x flattened; -1 is skipped) multiplied by
factor, each element once however often its index is listed; factor 0 clears
them to 0, NaN and Inf included. Error feedback's update: factor 0 leaves the
residual of what was not sent, 1 - m masks the velocity. x's buffer is reused
when TensorFlow allows. Memory floor: the indices read and a random read and
write per index; a copy of x (n reads and writes) first when its buffer is
not reused.
)doc");

}  // namespace tfcomp
