//===- LinearGeometry.h - The GEMM of a linear layer ------------*- C++ -*-===//
//
// A linear-class op (linear, linear_grad_input, linear_grad_weight) runs one
// GEMM, described by its layer's geometry: `rows` the product of the
// activation's leading dimensions, the weight [out, in]. The three kinds of
// one layer share it (2 x rows x in x out FLOPs each). The plan derives it
// from an op's operands (zeroc/Plan/Plan.h, linearGeometry), the cost model
// looks calibrated rates up by it (ClusterCalibration::matmulShape), and
// zerorun --calibrate --shapes times it.
//
//===----------------------------------------------------------------------===//

#ifndef ZEROC_SUPPORT_LINEARGEOMETRY_H
#define ZEROC_SUPPORT_LINEARGEOMETRY_H

#include <cstdint>
#include <tuple>

namespace zeroc {

struct LinearGeometry {
  int64_t rows = 0, in = 0, out = 0;
  double flops() const { return 2.0 * double(rows) * double(in) * double(out); }
  bool operator<(const LinearGeometry &o) const {
    return std::tie(rows, in, out) < std::tie(o.rows, o.in, o.out);
  }
  bool operator==(const LinearGeometry &o) const {
    return rows == o.rows && in == o.in && out == o.out;
  }
};

} // namespace zeroc

#endif // ZEROC_SUPPORT_LINEARGEOMETRY_H
