//===- ModelOps.cpp - Verifiers and interfaces of the model ops -----------===//
//
// Shape and dtype rules of every op, with messages that say what was expected
// and what was found; each op's cost and saved-for-backward accounting; and
// how each forward op builds its backward.
//
//===----------------------------------------------------------------------===//

#include "model/ModelOps.h"
#include "zeroc/Plan/AttentionFlops.h"
#include "zeroc/Plan/MoeFlops.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"

#include <cmath>

using namespace mlir;
using namespace zeroc;
using namespace zeroc::model;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

std::optional<DType> zeroc::model::toDType(Type t) {
  if (t.isF32())
    return DType::F32;
  if (t.isBF16())
    return DType::BF16;
  if (t.isF16())
    return DType::F16;
  if (t.isSignlessInteger(32))
    return DType::I32;
  return std::nullopt;
}

int64_t zeroc::model::tensorBytes(Type type) {
  auto tensor = dyn_cast_or_null<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  std::optional<DType> dtype = toDType(tensor.getElementType());
  return dtype ? tensor.getNumElements() * bytesPerElement(*dtype) : 0;
}

/// Whether `v` is the state a forward op yields for its backward.
static bool isSavedState(Value v) {
  auto keeps = v.getDefiningOp<SavesForBackwardOpInterface>();
  return keeps && keeps.getSavedState() == v;
}

// The saved state (written by the forward, read by its backward) is left
// out: the cost model's per-op traffic predates it being a value, and what a
// kernel moves for it depends on the kernel (a flash-style attention keeps
// one log-sum-exp per row instead of the probabilities).
int64_t zeroc::model::detail::operandAndResultBytes(Operation *op) {
  int64_t bytes = 0;
  for (Value v : op->getOperands())
    if (!isSavedState(v))
      bytes += tensorBytes(v.getType());
  for (Value v : op->getResults())
    if (!isSavedState(v))
      bytes += tensorBytes(v.getType());
  return bytes;
}

static RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

static int64_t numElements(Value v) { return tensorOf(v).getNumElements(); }

/// "[4, 1024, 768]"
static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

static LogicalResult expectRank(Operation *op, StringRef name, Value v,
                                int64_t rank, StringRef layout) {
  int64_t found = tensorOf(v).getRank();
  if (found == rank)
    return success();
  return op->emitOpError() << name << " must be rank " << rank << " (" << layout
                           << "), found rank " << found << " "
                           << shapeString(tensorOf(v).getShape());
}

/// Every float operand and result shares the element type of `ref`.
static LogicalResult expectSameElementType(Operation *op, StringRef refName,
                                           Value ref, Value savedState = {}) {
  Type expected = tensorOf(ref).getElementType();
  auto check = [&](StringRef kind, unsigned index, Value v) -> LogicalResult {
    Type found = tensorOf(v).getElementType();
    // Saved statistics are f32 whatever the activations are.
    if (!isa<FloatType>(found) || found == expected || v == savedState)
      return success();
    return op->emitOpError() << kind << " #" << index << " has element type "
                             << found << ", expected " << expected
                             << " (the element type of " << refName << ")";
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (failed(check("operand", i, v)))
      return failure();
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (failed(check("result", i, v)))
      return failure();
  return success();
}

static LogicalResult expectShape(Operation *op, StringRef name, Value v,
                                 ArrayRef<int64_t> expected, StringRef why) {
  ArrayRef<int64_t> found = tensorOf(v).getShape();
  if (found == expected)
    return success();
  return op->emitOpError() << name << " has shape " << shapeString(found)
                           << ", expected " << shapeString(expected) << " ("
                           << why << ")";
}

/// The gradient of a single-result op's result, for buildBackward. Null, with
/// `operandGrads` filled with nulls, when no gradient reached the result:
/// nothing then flows back through the op. Callers return it as it is when it
/// is a failure or null (it converts to failure, or success, respectively).
static FailureOr<Value> resultGradient(Operation *op, ValueRange resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  if (resultGrads.size() != op->getNumResults())
    return op->emitOpError()
           << "buildBackward expects one gradient per result ("
           << op->getNumResults() << "), found " << resultGrads.size();
  if (!resultGrads.front())
    operandGrads.append(op->getNumOperands(), Value());
  return resultGrads.front();
}

//===----------------------------------------------------------------------===//
// ParamOp, ParamRefOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  RankedTensorType type = getTensorType();
  if (type.getRank() == 0)
    return emitOpError() << "parameter @" << getSymName()
                         << " must have rank >= 1, found a 0-d tensor";
  if (llvm::is_contained(type.getShape(), 0))
    return emitOpError() << "parameter @" << getSymName()
                         << " has an empty dimension in its shape "
                         << shapeString(type.getShape());
  if (std::optional<int64_t> rows = getValidRows();
      rows && (*rows < 1 || *rows > type.getDimSize(0)))
    return emitOpError() << "parameter @" << getSymName() << " has valid_rows "
                         << *rows << "; expected 1 to its first dimension, "
                         << type.getDimSize(0);
  return success();
}

RankedTensorType ParamOp::getParameterType() { return getTensorType(); }

/// The type of the parameter that `name` declares (a model.param, or a
/// partitioned sched.tensor), or an error on `op`.
static FailureOr<RankedTensorType>
lookupParam(Operation *op, SymbolTableCollection &symbolTable,
            FlatSymbolRefAttr name) {
  Operation *target = symbolTable.lookupNearestSymbolFrom(op, name);
  if (auto param = dyn_cast_or_null<ParameterOpInterface>(target))
    if (RankedTensorType type = param.getParameterType())
      return type;
  return op->emitOpError() << name
                           << (target ? " is not a model.param"
                                      : " does not name a model.param in the "
                                        "enclosing module");
}

LogicalResult ParamRefOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<RankedTensorType> param =
      lookupParam(*this, symbolTable, getParamAttr());
  if (failed(param))
    return failure();
  if (*param != getType())
    return emitOpError() << "result type " << getType()
                         << " does not match the type " << *param
                         << " of parameter " << getParamAttr();
  return success();
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  if (failed(expectRank(*this, "table", getTable(), 2, "[vocab, hidden]")) ||
      failed(expectRank(*this, "ids", getIds(), 2, "[batch, seq]")))
    return failure();
  ArrayRef<int64_t> ids = tensorOf(getIds()).getShape();
  int64_t hidden = tensorOf(getTable()).getDimSize(1);
  if (failed(expectShape(*this, "result", getResult(), {ids[0], ids[1], hidden},
                         "[batch, seq] of ids, hidden of the table")))
    return failure();
  return expectSameElementType(*this, "the table", getTable());
}

int64_t EmbeddingOp::getForwardFlops() { return 0; }

// Reads one table row per token, not the whole table.
int64_t EmbeddingOp::getForwardBytes() {
  return tensorBytes(getIds().getType()) +
         2 * tensorBytes(getResult().getType());
}

void EmbeddingOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getIds());
}

// Token ids get no gradient.
LogicalResult EmbeddingOp::buildBackward(OpBuilder &builder,
                                         ValueRange resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  operandGrads.push_back(builder.create<EmbeddingBackwardOp>(
      getLoc(), getTable().getType(), *dy, getIds()));
  operandGrads.push_back(Value());
  return success();
}

LogicalResult PositionEmbeddingOp::verify() {
  if (failed(expectRank(*this, "table", getTable(), 2,
                        "[max_positions, hidden]")) ||
      failed(
          expectRank(*this, "result", getResult(), 3, "[batch, seq, hidden]")))
    return failure();
  ArrayRef<int64_t> table = tensorOf(getTable()).getShape();
  ArrayRef<int64_t> result = tensorOf(getResult()).getShape();
  if (result[1] > table[0])
    return emitOpError() << "sequence length " << result[1] << " exceeds the "
                         << table[0] << " positions of the table";
  if (result[2] != table[1])
    return emitOpError() << "result hidden size " << result[2]
                         << " does not match the table's hidden size "
                         << table[1];
  return expectSameElementType(*this, "the table", getTable());
}

int64_t PositionEmbeddingOp::getForwardFlops() { return 0; }

// Reads seq rows of the table and writes the broadcast result.
int64_t PositionEmbeddingOp::getForwardBytes() {
  RankedTensorType result = tensorOf(getResult());
  return tensorBytes(result) / result.getDimSize(0) + tensorBytes(result);
}

void PositionEmbeddingOp::getSavedValues(SmallVectorImpl<Value> &) {}

LogicalResult
PositionEmbeddingOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  operandGrads.push_back(builder.create<PositionEmbeddingBackwardOp>(
      getLoc(), getTable().getType(), *dy));
  return success();
}

//===----------------------------------------------------------------------===//
// LinearOp
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  if (input.getRank() < 2)
    return emitOpError() << "input must be rank >= 2 ([..., in_features]), "
                            "found rank "
                         << input.getRank();
  if (failed(expectRank(*this, "weight", getWeight(), 2,
                        "[out_features, in_features]")))
    return failure();
  ArrayRef<int64_t> weight = tensorOf(getWeight()).getShape();
  int64_t in = input.getShape().back();
  if (weight[1] != in)
    return emitOpError() << "weight " << shapeString(weight) << " expects "
                         << weight[1] << " input features, but the input "
                         << shapeString(input.getShape()) << " has " << in;
  if (getBias() && failed(expectShape(*this, "bias", getBias(), {weight[0]},
                                      "[out_features] of the weight")))
    return failure();
  SmallVector<int64_t> expected(input.getShape());
  expected.back() = weight[0];
  if (failed(expectShape(*this, "result", getResult(), expected,
                         "input with its last dimension replaced by "
                         "out_features")))
    return failure();
  return expectSameElementType(*this, "the input", getInput());
}

int64_t LinearOp::getForwardFlops() {
  RankedTensorType weight = tensorOf(getWeight());
  int64_t rows = numElements(getInput()) / weight.getDimSize(1);
  int64_t flops = 2 * rows * weight.getNumElements();
  if (getBias())
    flops += rows * weight.getDimSize(0);
  return flops;
}

// dW needs the input; dX needs the weight, which is a parameter.
void LinearOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
  saved.push_back(getWeight());
}

// A matrix product: selective recomputation keeps its output.
bool LinearOp::isKeptBySelectiveRecompute() { return true; }

LogicalResult LinearOp::buildBackward(OpBuilder &builder,
                                      ValueRange resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  Location loc = getLoc();
  operandGrads.push_back(builder.create<LinearGradInputOp>(
      loc, getInput().getType(), *dy, getWeight()));
  operandGrads.push_back(builder.create<LinearGradWeightOp>(
      loc, getWeight().getType(), *dy, getInput()));
  if (getBias())
    operandGrads.push_back(
        builder.create<LinearGradBiasOp>(loc, getBias().getType(), *dy));
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

using NamedValues = ArrayRef<std::pair<StringRef, Value>>;

/// Values in `affine` of shape [hidden] (weight, bias and their gradients),
/// values in `likeInput` of the input's type (result, dy, dx).
static LogicalResult verifyNorm(Operation *op, Value input, NamedValues affine,
                                NamedValues likeInput, double epsilon,
                                Value savedState) {
  int64_t hidden = tensorOf(input).getShape().empty()
                       ? 0
                       : tensorOf(input).getShape().back();
  if (tensorOf(input).getRank() < 1)
    return op->emitOpError() << "input must have rank >= 1";
  for (auto [name, v] : affine)
    if (failed(expectShape(op, name, v, {hidden},
                           "[hidden], the last dimension of the input")))
      return failure();
  for (auto [name, v] : likeInput)
    if (v.getType() != input.getType())
      return op->emitOpError()
             << name << " type " << v.getType()
             << " does not match the input type " << input.getType();
  if (!(epsilon > 0.0))
    return op->emitOpError() << "epsilon must be positive, found " << epsilon;
  return expectSameElementType(op, "the input", input, savedState);
}

/// Per-row f32 statistics of a normalization: `count` of them (if more than
/// one, stacked along a new leading dimension) per row of the input, a row
/// being every element but the last dimension.
static RankedTensorType normStatistics(Value input, int64_t count) {
  ArrayRef<int64_t> shape = tensorOf(input).getShape();
  SmallVector<int64_t> stats;
  if (count > 1)
    stats.push_back(count);
  stats.append(shape.begin(), shape.end() - 1);
  return RankedTensorType::get(stats, Float32Type::get(input.getContext()));
}

/// The state a forward op yields for its backward, where it yields it.
static LogicalResult verifyYieldedState(SavesForBackwardOpInterface op) {
  Value saved = op.getSavedState();
  if (!saved || saved.getType() == op.getSavedStateType())
    return success();
  return op->emitOpError() << "saved state type " << saved.getType()
                           << " does not match the expected "
                           << op.getSavedStateType();
}

/// A backward op's `saved` operand is the state its forward op yielded:
/// that is how the two are linked, never by name or location.
template <typename ForwardOp>
static LogicalResult verifyReadState(Operation *op, Value saved,
                                     RankedTensorType expected) {
  if (saved.getType() != expected)
    return op->emitOpError() << "saved state type " << saved.getType()
                             << " does not match the expected " << expected;
  auto forward = saved.getDefiningOp<ForwardOp>();
  if (!forward || forward.getSaved() != saved)
    return op->emitOpError() << "saved state must be the saved result of a '"
                             << ForwardOp::getOperationName() << "'";
  return success();
}

/// The state of a forward op that builds its backward: yielded in a training
/// graph, where zero-expand-training-step asks for it.
static FailureOr<Value> stateForBackward(SavesForBackwardOpInterface op) {
  if (Value saved = op.getSavedState())
    return saved;
  return op->emitOpError()
         << "yields no saved state for its backward; zero-expand-training-step "
            "gives it one before building the backward";
}

LogicalResult LayerNormOp::verify() {
  if (failed(verifyNorm(*this, getInput(),
                        {{"weight", getWeight()}, {"bias", getBias()}},
                        {{"result", getResult()}},
                        getEpsilon().convertToDouble(), getSaved())))
    return failure();
  return verifyYieldedState(*this);
}

// Per element: mean 1, variance 3, normalize 2, affine 2.
int64_t LayerNormOp::getForwardFlops() { return 8 * numElements(getInput()); }

void LayerNormOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
}

LogicalResult LayerNormOp::buildBackward(OpBuilder &builder,
                                         ValueRange resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  FailureOr<Value> saved = stateForBackward(*this);
  if (failed(saved))
    return failure();
  auto backward = builder.create<LayerNormBackwardOp>(
      getLoc(), getInput().getType(), getWeight().getType(),
      getBias().getType(), getInput(), getWeight(), *dy, *saved,
      getEpsilonAttr());
  operandGrads.append(backward->result_begin(), backward->result_end());
  return success();
}

// Mean and reciprocal standard deviation, f32, one each per row.
RankedTensorType LayerNormOp::getSavedStateType() {
  return normStatistics(getInput(), 2);
}

Value LayerNormOp::getSavedState() { return getSaved(); }

LogicalResult RMSNormOp::verify() {
  if (failed(verifyNorm(*this, getInput(), {{"weight", getWeight()}},
                        {{"result", getResult()}},
                        getEpsilon().convertToDouble(), getSaved())))
    return failure();
  return verifyYieldedState(*this);
}

// Per element: square and sum 2, normalize 1, scale 1.
int64_t RMSNormOp::getForwardFlops() { return 4 * numElements(getInput()); }

void RMSNormOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
}

LogicalResult RMSNormOp::buildBackward(OpBuilder &builder,
                                       ValueRange resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  FailureOr<Value> saved = stateForBackward(*this);
  if (failed(saved))
    return failure();
  auto backward = builder.create<RMSNormBackwardOp>(
      getLoc(), getInput().getType(), getWeight().getType(), getInput(),
      getWeight(), *dy, *saved, getEpsilonAttr(), getUnitOffsetAttr());
  operandGrads.append(backward->result_begin(), backward->result_end());
  return success();
}

// Reciprocal RMS, f32, one per row.
RankedTensorType RMSNormOp::getSavedStateType() {
  return normStatistics(getInput(), 1);
}

Value RMSNormOp::getSavedState() { return getSaved(); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// Cube 2, scale-and-add 2, scale 1, tanh 1, add 1, final product 1.
int64_t GeluOp::getForwardFlops() { return 8 * numElements(getInput()); }

void GeluOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
}

LogicalResult GeluOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  operandGrads.push_back(
      builder.create<GeluBackwardOp>(getLoc(), getInput(), *dy));
  return success();
}

// Exp 1, add 1, divide 1, multiply 1.
int64_t SiluOp::getForwardFlops() { return 4 * numElements(getInput()); }

void SiluOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
}

LogicalResult SiluOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  operandGrads.push_back(
      builder.create<SiluBackwardOp>(getLoc(), getInput(), *dy));
  return success();
}

int64_t AddOp::getForwardFlops() { return numElements(getLhs()); }

void AddOp::getSavedValues(SmallVectorImpl<Value> &) {}

// The gradient passes through to both operands unchanged.
LogicalResult AddOp::buildBackward(OpBuilder &, ValueRange resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  operandGrads.append({*dy, *dy});
  return success();
}

int64_t MulOp::getForwardFlops() { return numElements(getLhs()); }

void MulOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getLhs());
  saved.push_back(getRhs());
}

// d lhs = dy * rhs, d rhs = dy * lhs.
LogicalResult MulOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  operandGrads.push_back(builder.create<MulOp>(getLoc(), *dy, getRhs()));
  operandGrads.push_back(builder.create<MulOp>(getLoc(), *dy, getLhs()));
  return success();
}

/// The rules shared by rotary and rotary_backward; `name` is the operand.
static LogicalResult verifyRotary(Operation *op, StringRef name, Value input,
                                  int64_t headDim, double theta) {
  if (failed(expectRank(op, name, input, 3, "[batch, seq, heads * head_dim]")))
    return failure();
  int64_t width = tensorOf(input).getShape().back();
  if (headDim % 2 != 0)
    return op->emitOpError()
           << "head_dim must be even (RoPE rotates pairs), found " << headDim;
  if (width % headDim != 0)
    return op->emitOpError() << "last dimension " << width
                             << " is not a multiple of head_dim " << headDim;
  if (!(theta > 0.0))
    return op->emitOpError() << "theta must be positive, found " << theta;
  return success();
}

LogicalResult RotaryOp::verify() {
  return verifyRotary(*this, "input", getInput(), getHeadDim(),
                      getTheta().convertToDouble());
}

// Two products and a sum per element; the angles are recomputed, not stored.
int64_t RotaryOp::getForwardFlops() { return 3 * numElements(getInput()); }

void RotaryOp::getSavedValues(SmallVectorImpl<Value> &) {}

LogicalResult RotaryOp::buildBackward(OpBuilder &builder,
                                      ValueRange resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  operandGrads.push_back(builder.create<RotaryBackwardOp>(
      getLoc(), getType(), *dy, getHeadDimAttr(), getThetaAttr()));
  return success();
}

LogicalResult ScaleOp::verify() {
  double factor = getFactor().convertToDouble();
  if (!std::isfinite(factor))
    return emitOpError() << "factor must be finite, found " << factor;
  return success();
}

// One product per element.
int64_t ScaleOp::getForwardFlops() { return numElements(getInput()); }

void ScaleOp::getSavedValues(SmallVectorImpl<Value> &) {}

// Linear: dx = dy * c, the same op.
LogicalResult ScaleOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  operandGrads.push_back(
      builder.create<ScaleOp>(getLoc(), *dy, getFactorAttr()));
  return success();
}

/// The rules of split and split_backward: `pieces` cut the last dimension
/// of `whole` in order (same leading dimensions and element type, widths
/// summing to its width).
static LogicalResult verifySplit(Operation *op, StringRef wholeName,
                                 Value whole, StringRef pieceKind,
                                 ValueRange pieces) {
  if (pieces.empty())
    return op->emitOpError() << "expects at least one " << pieceKind;
  RankedTensorType type = tensorOf(whole);
  if (type.getRank() < 1)
    return op->emitOpError() << wholeName << " must have rank >= 1";
  int64_t width = 0;
  for (auto [i, piece] : llvm::enumerate(pieces)) {
    RankedTensorType p = tensorOf(piece);
    SmallVector<int64_t> expected(type.getShape());
    expected.back() = p.getRank() == type.getRank() ? p.getShape().back() : 0;
    if (p.getShape() != ArrayRef<int64_t>(expected) ||
        p.getElementType() != type.getElementType())
      return op->emitOpError()
             << pieceKind << " #" << i << " has type " << p << ", expected "
             << "the leading dimensions and element type of the " << wholeName
             << " " << type << " with any last dimension";
    width += p.getShape().back();
  }
  if (width != type.getShape().back())
    return op->emitOpError()
           << "the " << pieceKind << "s' last dimensions sum to " << width
           << ", expected " << type.getShape().back() << " (the last dimension "
           << "of the " << wholeName << ")";
  return success();
}

LogicalResult SplitOp::verify() {
  return verifySplit(*this, "input", getInput(), "result", getPieces());
}

// A copy.
int64_t SplitOp::getForwardFlops() { return 0; }

void SplitOp::getSavedValues(SmallVectorImpl<Value> &) {}

// The pieces' gradients concatenated. Every piece must receive one: a
// partial gradient would need zeros for the others, which no generated
// model needs.
LogicalResult SplitOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  if (resultGrads.size() != getNumResults())
    return emitOpError() << "buildBackward expects one gradient per result ("
                         << getNumResults() << "), found "
                         << resultGrads.size();
  if (llvm::all_of(resultGrads, [](Value g) { return !g; })) {
    operandGrads.push_back(Value());
    return success();
  }
  for (auto [i, g] : llvm::enumerate(resultGrads))
    if (!g)
      return emitOpError() << "result #" << i
                           << " does not reach the loss while others do: "
                              "split's backward needs every piece's gradient";
  operandGrads.push_back(builder.create<SplitBackwardOp>(
      getLoc(), getInput().getType(), resultGrads));
  return success();
}

//===----------------------------------------------------------------------===//
// CausalAttentionOp
//===----------------------------------------------------------------------===//

/// The rules on q, k and v shared by attention and its backward: ranks, head
/// counts, and k and v shaped for the key/value heads.
static LogicalResult verifyAttentionInputs(Operation *op, Value qv, Value kv,
                                           Value vv, int64_t heads,
                                           int64_t kvHeads) {
  for (auto [name, v] :
       {std::pair<StringRef, Value>{"q", qv}, {"k", kv}, {"v", vv}})
    if (failed(expectRank(op, name, v, 3, "[batch, seq, heads * head_dim]")))
      return failure();
  ArrayRef<int64_t> q = tensorOf(qv).getShape();
  if (q[2] % heads != 0)
    return op->emitOpError()
           << "q width " << q[2] << " is not a multiple of num_heads " << heads;
  if (heads % kvHeads != 0)
    return op->emitOpError()
           << "num_heads " << heads << " is not a multiple of num_kv_heads "
           << kvHeads;
  int64_t headDim = q[2] / heads;
  SmallVector<int64_t> kvShape = {q[0], q[1], kvHeads * headDim};
  std::string why = "num_kv_heads " + std::to_string(kvHeads) + " x head_dim " +
                    std::to_string(headDim) + " for batch and seq of q";
  if (failed(expectShape(op, "k", kv, kvShape, why)) ||
      failed(expectShape(op, "v", vv, kvShape, why)))
    return failure();
  return success();
}

LogicalResult CausalAttentionOp::verify() {
  // I64Attr's getter is unsigned: the signed value is its cast.
  if (int64_t window = int64_t(getWindow()); window < 0)
    return emitOpError() << "window must be >= 0 (0: none), found " << window;
  if (failed(verifyAttentionInputs(*this, getQ(), getK(), getV(), getNumHeads(),
                                   getNumKvHeads())) ||
      failed(expectShape(*this, "result", getResult(),
                         tensorOf(getQ()).getShape(), "the shape of q")) ||
      failed(expectSameElementType(*this, "q", getQ(), getSaved())))
    return failure();
  return verifyYieldedState(*this);
}

/// Attention scores as the FLOP convention counts them (Plan/AttentionFlops.h,
/// shared with zerorun's calibration).
static int64_t scoresOf(Value q, int64_t heads, int64_t window) {
  ArrayRef<int64_t> shape = tensorOf(q).getShape();
  return zeroc::attentionScores(shape[0], shape[1], heads, window);
}

/// What attention's `kernel` keeps for its backward: the softmax
/// probabilities [batch, heads, seq, seq] in q's dtype (materialized), or the
/// row log-sum-exp of the scaled scores, f32 [batch, heads, seq] (flash).
static RankedTensorType attentionState(Value q, int64_t heads,
                                       AttentionKernel kernel) {
  RankedTensorType type = tensorOf(q);
  ArrayRef<int64_t> shape = type.getShape();
  switch (kernel) {
  case AttentionKernel::Flash:
    return RankedTensorType::get({shape[0], heads, shape[1]},
                                 Float32Type::get(type.getContext()));
  case AttentionKernel::Materialized:
    return RankedTensorType::get({shape[0], heads, shape[1], shape[1]},
                                 type.getElementType());
  }
  llvm_unreachable("unknown attention kernel");
}

int64_t CausalAttentionOp::getForwardFlops() {
  int64_t scores = scoresOf(getQ(), getNumHeads(), int64_t(getWindow()));
  return attentionForwardFlops(scores, getHeadDim());
}

void CausalAttentionOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.append({getQ(), getK(), getV(), getResult()});
}

// The row log-sum-exp (flash) or the probabilities (materialized).
RankedTensorType CausalAttentionOp::getSavedStateType() {
  return attentionState(getQ(), getNumHeads(), getKernel());
}

Value CausalAttentionOp::getSavedState() { return getSaved(); }

// A flash kernel keeps only its output and the row log-sum-exp, small for
// its FLOPs, so selective recomputation keeps them; the materialised
// probabilities are the large, cheap activation Korthikanti et al. recompute.
bool CausalAttentionOp::isKeptBySelectiveRecompute() {
  return getKernel() == AttentionKernel::Flash;
}

LogicalResult
CausalAttentionOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  FailureOr<Value> saved = stateForBackward(*this);
  if (failed(saved))
    return failure();
  auto backward = builder.create<CausalAttentionBackwardOp>(
      getLoc(), getQ().getType(), getK().getType(), getV().getType(), getQ(),
      getK(), getV(), getResult(), *dy, *saved, getNumHeadsAttr(),
      getNumKvHeadsAttr(), getKernelAttr(), getWindowAttr());
  operandGrads.append(backward->result_begin(), backward->result_end());
  return success();
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

/// A cross-entropy's `classes`: the vocabulary, the first `classes` of the
/// logits' last dimension `vocab`.
static LogicalResult
verifyClasses(Operation *op, std::optional<int64_t> classes, int64_t vocab) {
  if (classes && (*classes < 1 || *classes > vocab))
    return op->emitOpError() << "classes " << *classes
                             << " must be from 1 to the logits' last "
                                "dimension, "
                             << vocab;
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  if (failed(
          expectRank(*this, "logits", getLogits(), 3, "[batch, seq, vocab]")) ||
      failed(expectRank(*this, "targets", getTargets(), 2, "[batch, seq]")))
    return failure();
  ArrayRef<int64_t> logits = tensorOf(getLogits()).getShape();
  if (failed(expectShape(*this, "targets", getTargets(), {logits[0], logits[1]},
                         "[batch, seq] of the logits")))
    return failure();
  return verifyClasses(*this, getClasses(), logits[2]);
}

// Max, subtract, exp and sum per logit.
int64_t CrossEntropyOp::getForwardFlops() {
  return 4 * numElements(getLogits());
}

void CrossEntropyOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getLogits());
  saved.push_back(getTargets());
}

// The loss's gradient is the backward seed; targets get no gradient.
LogicalResult
CrossEntropyOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dloss = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dloss) || !*dloss)
    return dloss;
  operandGrads.push_back(builder.create<CrossEntropyBackwardOp>(
      getLoc(), getLogits().getType(), getLogits(), getTargets(), *dloss,
      getClassesAttr()));
  operandGrads.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingBackwardOp::verify() {
  if (failed(expectRank(*this, "dy", getDy(), 3, "[batch, seq, hidden]")) ||
      failed(expectRank(*this, "ids", getIds(), 2, "[batch, seq]")) ||
      failed(expectRank(*this, "result", getResult(), 2, "[vocab, hidden]")))
    return failure();
  ArrayRef<int64_t> dy = tensorOf(getDy()).getShape();
  int64_t vocab = tensorOf(getResult()).getDimSize(0);
  if (failed(expectShape(*this, "ids", getIds(), {dy[0], dy[1]},
                         "[batch, seq] of dy")) ||
      failed(expectShape(*this, "result", getResult(), {vocab, dy[2]},
                         "[vocab, hidden] with the hidden size of dy")))
    return failure();
  return expectSameElementType(*this, "dy", getDy());
}

// One add per element of dy.
int64_t EmbeddingBackwardOp::getForwardFlops() { return numElements(getDy()); }

LogicalResult PositionEmbeddingBackwardOp::verify() {
  if (failed(expectRank(*this, "dy", getDy(), 3, "[batch, seq, hidden]")) ||
      failed(expectRank(*this, "result", getResult(), 2,
                        "[max_positions, hidden]")))
    return failure();
  ArrayRef<int64_t> dy = tensorOf(getDy()).getShape();
  ArrayRef<int64_t> table = tensorOf(getResult()).getShape();
  if (dy[1] > table[0])
    return emitOpError() << "sequence length " << dy[1] << " of dy exceeds the "
                         << table[0] << " positions of the result";
  if (table[1] != dy[2])
    return emitOpError() << "result hidden size " << table[1]
                         << " does not match the hidden size " << dy[2]
                         << " of dy";
  return expectSameElementType(*this, "dy", getDy());
}

// One add per element of dy (the sum over the batch).
int64_t PositionEmbeddingBackwardOp::getForwardFlops() {
  return numElements(getDy());
}

/// dy of a linear layer: rank >= 2, [..., out_features].
static LogicalResult expectLinearGradient(Operation *op, Value dy) {
  int64_t rank = tensorOf(dy).getRank();
  if (rank >= 2)
    return success();
  return op->emitOpError()
         << "dy must be rank >= 2 ([..., out_features]), found rank " << rank;
}

LogicalResult LinearGradInputOp::verify() {
  if (failed(expectLinearGradient(*this, getDy())) ||
      failed(expectRank(*this, "weight", getWeight(), 2,
                        "[out_features, in_features]")))
    return failure();
  ArrayRef<int64_t> dy = tensorOf(getDy()).getShape();
  ArrayRef<int64_t> weight = tensorOf(getWeight()).getShape();
  if (weight[0] != dy.back())
    return emitOpError() << "weight " << shapeString(weight) << " expects "
                         << weight[0] << " output features, but dy "
                         << shapeString(dy) << " has " << dy.back();
  SmallVector<int64_t> expected(dy);
  expected.back() = weight[1];
  if (failed(expectShape(*this, "result", getResult(), expected,
                         "dy with its last dimension replaced by "
                         "in_features")))
    return failure();
  return expectSameElementType(*this, "dy", getDy());
}

// dy [rows, out] times W [out, in].
int64_t LinearGradInputOp::getForwardFlops() {
  return 2 * numElements(getDy()) * tensorOf(getWeight()).getDimSize(1);
}

LogicalResult LinearGradWeightOp::verify() {
  if (failed(expectLinearGradient(*this, getDy())))
    return failure();
  ArrayRef<int64_t> dy = tensorOf(getDy()).getShape();
  ArrayRef<int64_t> input = tensorOf(getInput()).getShape();
  if (input.empty())
    return emitOpError() << "input must be rank >= 2 ([..., in_features]), "
                            "found rank 0";
  SmallVector<int64_t> expected(dy);
  expected.back() = input.back();
  if (failed(expectShape(*this, "input", getInput(), expected,
                         "the leading dimensions of dy")) ||
      failed(expectShape(*this, "result", getResult(),
                         {dy.back(), input.back()},
                         "[out_features, in_features] of dy and the input")))
    return failure();
  return expectSameElementType(*this, "dy", getDy());
}

// dy^T [out, rows] times x [rows, in].
int64_t LinearGradWeightOp::getForwardFlops() {
  return 2 * numElements(getDy()) * tensorOf(getInput()).getShape().back();
}

LogicalResult LinearGradBiasOp::verify() {
  if (failed(expectLinearGradient(*this, getDy())) ||
      failed(expectShape(*this, "result", getResult(),
                         {tensorOf(getDy()).getShape().back()},
                         "[out_features] of dy")))
    return failure();
  return expectSameElementType(*this, "dy", getDy());
}

// One add per element of dy.
int64_t LinearGradBiasOp::getForwardFlops() { return numElements(getDy()); }

LogicalResult LayerNormBackwardOp::verify() {
  if (failed(verifyNorm(*this, getInput(),
                        {{"weight", getWeight()},
                         {"dweight", getDweight()},
                         {"dbias", getDbias()}},
                        {{"dy", getDy()}, {"dinput", getDinput()}},
                        getEpsilon().convertToDouble(), getSaved())))
    return failure();
  return verifyReadState<LayerNormOp>(*this, getSaved(),
                                      normStatistics(getInput(), 2));
}

// Twice the forward's 8 per element.
int64_t LayerNormBackwardOp::getForwardFlops() {
  return 16 * numElements(getInput());
}

LogicalResult RMSNormBackwardOp::verify() {
  if (failed(verifyNorm(*this, getInput(),
                        {{"weight", getWeight()}, {"dweight", getDweight()}},
                        {{"dy", getDy()}, {"dinput", getDinput()}},
                        getEpsilon().convertToDouble(), getSaved())))
    return failure();
  if (failed(verifyReadState<RMSNormOp>(*this, getSaved(),
                                        normStatistics(getInput(), 1))))
    return failure();
  if (getSaved().getDefiningOp<RMSNormOp>().getUnitOffset() != getUnitOffset())
    return emitOpError() << "unit_offset must be its forward model.rmsnorm's";
  return success();
}

// Twice the forward's 4 per element.
int64_t RMSNormBackwardOp::getForwardFlops() {
  return 8 * numElements(getInput());
}

// Twice the forward's 8 per element.
int64_t GeluBackwardOp::getForwardFlops() {
  return 16 * numElements(getInput());
}

// Twice the forward's 4 per element.
int64_t SiluBackwardOp::getForwardFlops() {
  return 8 * numElements(getInput());
}

LogicalResult RotaryBackwardOp::verify() {
  return verifyRotary(*this, "dy", getDy(), getHeadDim(),
                      getTheta().convertToDouble());
}

// Twice the forward's 3 per element.
int64_t RotaryBackwardOp::getForwardFlops() { return 6 * numElements(getDy()); }

LogicalResult CausalAttentionBackwardOp::verify() {
  if (failed(verifyAttentionInputs(*this, getQ(), getK(), getV(), getNumHeads(),
                                   getNumKvHeads())))
    return failure();
  ArrayRef<int64_t> q = tensorOf(getQ()).getShape();
  ArrayRef<int64_t> k = tensorOf(getK()).getShape();
  if (failed(expectShape(*this, "out", getOut(), q, "the shape of q")) ||
      failed(expectShape(*this, "dout", getDout(), q, "the shape of q")) ||
      failed(expectShape(*this, "dq", getDq(), q, "the shape of q")) ||
      failed(expectShape(*this, "dk", getDk(), k, "the shape of k")) ||
      failed(expectShape(*this, "dv", getDv(), k, "the shape of v")) ||
      failed(expectSameElementType(*this, "q", getQ(), getSaved())))
    return failure();
  // The kernels' states differ in rank: a state of the right type comes from
  // a forward of the same kernel.
  if (failed(verifyReadState<CausalAttentionOp>(
          *this, getSaved(),
          attentionState(getQ(), getNumHeads(), getKernel()))))
    return failure();
  int64_t window = int64_t(getWindow());
  int64_t forwardWindow =
      int64_t(getSaved().getDefiningOp<CausalAttentionOp>().getWindow());
  if (forwardWindow != window)
    return emitOpError() << "window " << window << " is not its forward's ("
                         << forwardWindow << ")";
  return success();
}

int64_t CausalAttentionBackwardOp::getForwardFlops() {
  int64_t scores = scoresOf(getQ(), getNumHeads(), int64_t(getWindow()));
  return attentionBackwardFlops(scores, getHeadDim(),
                                getKernel() == AttentionKernel::Flash);
}

LogicalResult SplitBackwardOp::verify() {
  return verifySplit(*this, "result", getResult(), "operand", getDpieces());
}

// A copy.
int64_t SplitBackwardOp::getForwardFlops() { return 0; }

LogicalResult CrossEntropyBackwardOp::verify() {
  if (failed(
          expectRank(*this, "logits", getLogits(), 3, "[batch, seq, vocab]")) ||
      failed(expectRank(*this, "targets", getTargets(), 2, "[batch, seq]")))
    return failure();
  ArrayRef<int64_t> logits = tensorOf(getLogits()).getShape();
  if (failed(expectShape(*this, "targets", getTargets(), {logits[0], logits[1]},
                         "[batch, seq] of the logits")))
    return failure();
  if (getResult().getType() != getLogits().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " does not match the logits type "
                         << getLogits().getType();
  return verifyClasses(*this, getClasses(), logits[2]);
}

// Twice the forward's 4 per logit.
int64_t CrossEntropyBackwardOp::getForwardFlops() {
  return 8 * numElements(getLogits());
}

//===----------------------------------------------------------------------===//
// Training step ops
//===----------------------------------------------------------------------===//

LogicalResult
AccumulateGradOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<RankedTensorType> param =
      lookupParam(*this, symbolTable, getParamAttr());
  if (failed(param))
    return failure();
  if (*param != getGrad().getType())
    return emitOpError() << "gradient type " << getGrad().getType()
                         << " does not match the type " << *param
                         << " of parameter " << getParamAttr();
  return success();
}

/// `NAME must be RANGE, found VALUE` unless `inRange` (and finite).
static LogicalResult expectInRange(function_ref<InFlightDiagnostic()> emitError,
                                   StringRef name, double value, bool inRange,
                                   StringRef range) {
  if (inRange && std::isfinite(value))
    return success();
  SmallString<16> found; // "0.5", "200", "1.0E-8"
  APFloat(value).toString(found, /*FormatPrecision=*/6);
  return emitError() << name << " must be " << range << ", found " << found;
}

static LogicalResult expectInRange(function_ref<InFlightDiagnostic()> emitError,
                                   StringRef name, int64_t value, bool inRange,
                                   StringRef range) {
  if (inRange)
    return success();
  return emitError() << name << " must be " << range << ", found " << value;
}

LogicalResult UnscaleGradsOp::verifySettings(
    function_ref<InFlightDiagnostic()> emitError, double staticLossScale,
    int64_t initialScalePower, int64_t lossScaleWindow, int64_t hysteresis,
    double minLossScale) {
  return success(
      succeeded(expectInRange(emitError, "static_loss_scale", staticLossScale,
                              staticLossScale >= 0.0,
                              ">= 0 (0 selects dynamic loss scaling)")) &&
      succeeded(
          expectInRange(emitError, "initial_scale_power", initialScalePower,
                        initialScalePower >= 0 && initialScalePower <= 127,
                        "in [0, 127] (2^power must be a finite f32)")) &&
      succeeded(expectInRange(emitError, "loss_scale_window", lossScaleWindow,
                              lossScaleWindow >= 1, ">= 1")) &&
      succeeded(expectInRange(emitError, "hysteresis", hysteresis,
                              hysteresis >= 1, ">= 1")) &&
      succeeded(expectInRange(emitError, "min_loss_scale", minLossScale,
                              minLossScale > 0.0, "positive")));
}

LogicalResult UnscaleGradsOp::verify() {
  return verifySettings([&] { return emitOpError(); },
                        getStaticLossScale().convertToDouble(),
                        getInitialScalePower(), getLossScaleWindow(),
                        getHysteresis(), getMinLossScale().convertToDouble());
}

LogicalResult ClipGradNormOp::verify() {
  double maxNorm = getMaxNorm().convertToDouble();
  return expectInRange([&] { return emitOpError(); }, "max_norm", maxNorm,
                       maxNorm > 0.0, "positive");
}

LogicalResult
AdamUpdateOp::verifySettings(function_ref<InFlightDiagnostic()> emitError,
                             double lr, double beta1, double beta2, double eps,
                             double weightDecay) {
  return success(
      succeeded(expectInRange(emitError, "lr", lr, lr >= 0.0, ">= 0")) &&
      succeeded(expectInRange(emitError, "beta1", beta1,
                              beta1 >= 0.0 && beta1 < 1.0, "in [0, 1)")) &&
      succeeded(expectInRange(emitError, "beta2", beta2,
                              beta2 >= 0.0 && beta2 < 1.0, "in [0, 1)")) &&
      succeeded(expectInRange(emitError, "eps", eps, eps > 0.0, "positive")) &&
      succeeded(expectInRange(emitError, "weight_decay", weightDecay,
                              weightDecay >= 0.0, ">= 0")));
}

LogicalResult
AdamUpdateOp::verifyLambSettings(function_ref<InFlightDiagnostic()> emitError,
                                 double maxCoeff, double minCoeff) {
  if (failed(expectInRange(emitError, "min_coeff", minCoeff, minCoeff >= 0.0,
                           ">= 0")))
    return failure();
  SmallString<16> min; // The bound in the message, as `found` prints it.
  APFloat(minCoeff).toString(min, /*FormatPrecision=*/6);
  std::string range = ">= min_coeff (" + std::string(min) + ")";
  return expectInRange(emitError, "max_coeff", maxCoeff, maxCoeff >= minCoeff,
                       range);
}

LogicalResult
AdamUpdateOp::verifyStepKind(function_ref<InFlightDiagnostic()> emitError,
                             bool adamw, bool lamb, FloatAttr maxCoeff,
                             FloatAttr minCoeff) {
  if (!lamb) {
    if (maxCoeff || minCoeff)
      return emitError() << "max_coeff and min_coeff need lamb";
    return success();
  }
  if (adamw)
    return emitError() << "lamb applies its own weight decay; adamw must not "
                          "be set with it";
  if (!maxCoeff || !minCoeff)
    return emitError() << "lamb needs max_coeff and min_coeff";
  return verifyLambSettings(emitError, maxCoeff.getValueAsDouble(),
                            minCoeff.getValueAsDouble());
}

LogicalResult AdamUpdateOp::verify() {
  auto emitError = [&] { return emitOpError(); };
  if (failed(verifySettings(
          emitError, getLr().convertToDouble(), getBeta1().convertToDouble(),
          getBeta2().convertToDouble(), getEps().convertToDouble(),
          getWeightDecay().convertToDouble())))
    return failure();
  return verifyStepKind(emitError, getAdamw(), getLamb(), getMaxCoeffAttr(),
                        getMinCoeffAttr());
}

LogicalResult
AdamUpdateOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return success(succeeded(lookupParam(*this, symbolTable, getParamAttr())));
}

#include "model/ModelInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "model/ModelOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

/// The element types of a mixture-of-experts op: `named` values share the
/// element type of the first; routing weights and logits are f32.
static LogicalResult expectElementTypes(Operation *op, NamedValues named) {
  Type expected = tensorOf(named.front().second).getElementType();
  for (auto [name, v] : named)
    if (tensorOf(v).getElementType() != expected)
      return op->emitOpError()
             << name << " has element type " << tensorOf(v).getElementType()
             << ", expected " << expected << " (the element type of "
             << named.front().first << ")";
  return success();
}

/// The routing of `input` [batch, seq, hidden] to top_k of num_experts:
/// weights (and indices) [batch, seq, top_k], the router's logits [batch,
/// seq, num_experts].
static LogicalResult verifyRouting(Operation *op, Value input, Value weights,
                                   Value indices, int64_t numExperts) {
  if (failed(expectRank(op, "input", input, 3, "[batch, seq, hidden]")) ||
      failed(expectRank(op, "weights", weights, 3, "[batch, seq, top_k]")))
    return failure();
  ArrayRef<int64_t> x = tensorOf(input).getShape();
  int64_t k = tensorOf(weights).getShape().back();
  if (failed(expectShape(op, "weights", weights, {x[0], x[1], k},
                         "[batch, seq] of the input, top_k")) ||
      failed(expectShape(op, "indices", indices, {x[0], x[1], k},
                         "the shape of the weights")))
    return failure();
  if (k > numExperts)
    return op->emitOpError()
           << "top_k " << k << " exceeds the " << numExperts << " experts";
  return success();
}

static int64_t tokensOf(Value input) {
  return numElements(input) / tensorOf(input).getShape().back();
}

LogicalResult MoeRouterOp::verify() {
  if (failed(
          expectRank(*this, "gate", getGate(), 2, "[num_experts, hidden]")) ||
      failed(expectRank(*this, "input", getInput(), 3, "[batch, seq, hidden]")))
    return failure();
  ArrayRef<int64_t> x = tensorOf(getInput()).getShape();
  int64_t experts = getNumExperts();
  if (failed(expectShape(*this, "gate", getGate(), {experts, x[2]},
                         "[num_experts, hidden of the input]")) ||
      failed(expectElementTypes(*this,
                                {{"input", getInput()}, {"gate", getGate()}})))
    return failure();
  int64_t k = int64_t(getTopK());
  if (failed(expectShape(*this, "weights", getWeights(), {x[0], x[1], k},
                         "[batch, seq] of the input, top_k")))
    return failure();
  if (failed(verifyRouting(*this, getInput(), getWeights(), getIndices(),
                           experts)))
    return failure();
  return verifyYieldedState(*this);
}

// Logits 2 * hidden per (token, expert); softmax 4 per logit (max,
// subtract-exp, sum, divide); normalisation 2 per selected weight.
int64_t MoeRouterOp::getForwardFlops() {
  int64_t tokens = tokensOf(getInput()), experts = getNumExperts();
  int64_t hidden = tensorOf(getInput()).getShape().back();
  return moeRouterProductFlops(tokens, experts, hidden) + 4 * tokens * experts +
         (getNormalize() ? 2 * tokens * int64_t(getTopK()) : 0);
}

// dgate needs the input; the selection is kept as the indices.
void MoeRouterOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
  saved.push_back(getGate());
  saved.push_back(getIndices());
}

// The logits, f32, one per (token, expert).
RankedTensorType MoeRouterOp::getSavedStateType() {
  ArrayRef<int64_t> x = tensorOf(getInput()).getShape();
  return RankedTensorType::get({x[0], x[1], getNumExperts()},
                               Float32Type::get(getContext()));
}

Value MoeRouterOp::getSavedState() { return getSaved(); }

// The indices get no gradient: the selection is a constant of the backward.
LogicalResult MoeRouterOp::buildBackward(OpBuilder &builder,
                                         ValueRange resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dw = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dw) || !*dw)
    return dw;
  FailureOr<Value> saved = stateForBackward(*this);
  if (failed(saved))
    return failure();
  auto backward = builder.create<MoeRouterBackwardOp>(
      getLoc(), getInput().getType(), getGate().getType(), getInput(),
      getGate(), *dw, *saved, getIndices(), getNormalizeAttr());
  operandGrads.append(backward->result_begin(), backward->result_end());
  return success();
}

/// The stacked expert parameters: w1, w3 [E, I, h], w2 [E, h, I], with h the
/// input's hidden size.
static LogicalResult verifyExpertWeights(Operation *op, Value input, Value w1,
                                         Value w3, Value w2) {
  if (failed(
          expectRank(op, "w1", w1, 3, "[num_experts, intermediate, hidden]")))
    return failure();
  ArrayRef<int64_t> s = tensorOf(w1).getShape();
  int64_t hidden = tensorOf(input).getShape().back();
  if (s[2] != hidden)
    return op->emitOpError()
           << "w1 " << shapeString(s) << " expects hidden size " << s[2]
           << ", but the input " << shapeString(tensorOf(input).getShape())
           << " has " << hidden;
  if (failed(expectShape(op, "w3", w3, s, "the shape of w1")) ||
      failed(expectShape(op, "w2", w2, {s[0], s[2], s[1]},
                         "[num_experts, hidden, intermediate] of w1")))
    return failure();
  return expectElementTypes(
      op, {{"input", input}, {"w1", w1}, {"w3", w3}, {"w2", w2}});
}

/// The experts' saved state: W1 v, W3 v and the experts' outputs of every
/// dispatched row, in the model dtype, one after the other.
static RankedTensorType expertsState(Value input, Value w1, int64_t topK) {
  int64_t rows = tokensOf(input) * topK;
  ArrayRef<int64_t> s = tensorOf(w1).getShape();
  return RankedTensorType::get({rows * (2 * s[1] + s[2])},
                               tensorOf(input).getElementType());
}

LogicalResult MoeExpertsOp::verify() {
  if (failed(
          expectRank(*this, "input", getInput(), 3, "[batch, seq, hidden]")) ||
      failed(
          verifyExpertWeights(*this, getInput(), getW1(), getW3(), getW2())) ||
      failed(verifyRouting(*this, getInput(), getWeights(), getIndices(),
                           getNumExperts())) ||
      failed(expectShape(*this, "result", getResult(),
                         tensorOf(getInput()).getShape(),
                         "the shape of the input")) ||
      failed(expectElementTypes(
          *this, {{"input", getInput()}, {"result", getResult()}})))
    return failure();
  if (auto share = getMaxExpertShareAttr()) {
    double s = share.getValueAsDouble();
    double lo = 1.0 / double(getNumExperts()), hi = 1.0 / double(getTopK());
    if (!(s >= lo * (1 - 1e-12) && s <= hi * (1 + 1e-12)))
      return emitOpError() << "max_expert_share " << s
                           << " is out of range: the busiest expert receives "
                              "from 1/num_experts ("
                           << lo << ", uniform) to 1/top_k (" << hi
                           << ", every token routed to it) of the dispatched "
                              "rows";
  }
  return verifyYieldedState(*this);
}

// The routed rows only: three products of 2 * hidden * intermediate per
// dispatched row; SiLU 4 and the product 1 per intermediate element; the
// weighted combine 2 per dispatched element.
int64_t MoeExpertsOp::getForwardFlops() {
  int64_t rows = tokensOf(getInput()) * getTopK();
  int64_t hidden = tensorOf(getInput()).getShape().back();
  int64_t inter = getIntermediateSize();
  return moeExpertProductFlops(rows, hidden, inter) + 5 * rows * inter +
         2 * rows * hidden;
}

void MoeExpertsOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.append(
      {getInput(), getWeights(), getIndices(), getW1(), getW3(), getW2()});
}

RankedTensorType MoeExpertsOp::getSavedStateType() {
  return expertsState(getInput(), getW1(), getTopK());
}

Value MoeExpertsOp::getSavedState() { return getSaved(); }

// Grouped matrix products: selective recomputation keeps the output.
bool MoeExpertsOp::isKeptBySelectiveRecompute() { return true; }

LogicalResult
MoeExpertsOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                            SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dy = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dy) || !*dy)
    return dy;
  FailureOr<Value> saved = stateForBackward(*this);
  if (failed(saved))
    return failure();
  auto backward = builder.create<MoeExpertsBackwardOp>(
      getLoc(),
      TypeRange{getInput().getType(), getWeights().getType(), getW1().getType(),
                getW3().getType(), getW2().getType()},
      getInput(), getWeights(), getIndices(), getW1(), getW3(), getW2(), *dy,
      *saved);
  operandGrads.append({backward.getDinput(), backward.getDweights(), Value(),
                       backward.getDw1(), backward.getDw3(),
                       backward.getDw2()});
  return success();
}

LogicalResult MoeRouterBackwardOp::verify() {
  if (failed(
          expectRank(*this, "gate", getGate(), 2, "[num_experts, hidden]")) ||
      failed(verifyRouting(*this, getInput(), getDweights(), getIndices(),
                           tensorOf(getGate()).getDimSize(0))))
    return failure();
  ArrayRef<int64_t> x = tensorOf(getInput()).getShape();
  int64_t experts = tensorOf(getGate()).getDimSize(0);
  if (failed(expectShape(*this, "gate", getGate(), {experts, x[2]},
                         "[num_experts, hidden of the input]")) ||
      failed(expectShape(*this, "saved", getSaved(), {x[0], x[1], experts},
                         "the logits, [batch, seq, num_experts]")) ||
      failed(expectShape(*this, "dinput", getDinput(), x, "the input's")) ||
      failed(expectShape(*this, "dgate", getDgate(),
                         tensorOf(getGate()).getShape(), "the gate's")) ||
      failed(expectElementTypes(*this, {{"input", getInput()},
                                        {"gate", getGate()},
                                        {"dinput", getDinput()},
                                        {"dgate", getDgate()}})))
    return failure();
  return verifyReadState<MoeRouterOp>(*this, getSaved(), tensorOf(getSaved()));
}

int64_t MoeRouterBackwardOp::getForwardFlops() {
  int64_t tokens = tokensOf(getInput());
  int64_t experts = tensorOf(getGate()).getDimSize(0);
  int64_t hidden = tensorOf(getInput()).getShape().back();
  return 2 * moeRouterProductFlops(tokens, experts, hidden) +
         6 * tokens * experts;
}

LogicalResult MoeExpertsBackwardOp::verify() {
  if (failed(
          expectRank(*this, "input", getInput(), 3, "[batch, seq, hidden]")) ||
      failed(verifyExpertWeights(*this, getInput(), getW1(), getW3(), getW2())))
    return failure();
  int64_t experts = tensorOf(getW1()).getDimSize(0);
  int64_t k = tensorOf(getWeights()).getShape().back();
  if (failed(verifyRouting(*this, getInput(), getWeights(), getIndices(),
                           experts)) ||
      failed(expectShape(*this, "dy", getDy(), tensorOf(getInput()).getShape(),
                         "the input's")) ||
      failed(expectShape(*this, "dinput", getDinput(),
                         tensorOf(getInput()).getShape(), "the input's")) ||
      failed(expectShape(*this, "dweights", getDweights(),
                         tensorOf(getWeights()).getShape(), "the weights'")) ||
      failed(expectShape(*this, "dw1", getDw1(), tensorOf(getW1()).getShape(),
                         "w1's")) ||
      failed(expectShape(*this, "dw3", getDw3(), tensorOf(getW3()).getShape(),
                         "w3's")) ||
      failed(expectShape(*this, "dw2", getDw2(), tensorOf(getW2()).getShape(),
                         "w2's")) ||
      failed(expectElementTypes(*this, {{"input", getInput()},
                                        {"dy", getDy()},
                                        {"dinput", getDinput()},
                                        {"dw1", getDw1()},
                                        {"dw3", getDw3()},
                                        {"dw2", getDw2()}})))
    return failure();
  return verifyReadState<MoeExpertsOp>(*this, getSaved(),
                                       expertsState(getInput(), getW1(), k));
}

int64_t MoeExpertsBackwardOp::getForwardFlops() {
  int64_t rows =
      tokensOf(getInput()) * tensorOf(getWeights()).getShape().back();
  int64_t hidden = tensorOf(getInput()).getShape().back();
  int64_t inter = tensorOf(getW1()).getDimSize(1);
  return 2 * moeExpertProductFlops(rows, hidden, inter) + 10 * rows * inter +
         4 * rows * hidden;
}

//===----------------------------------------------------------------------===//
// Expert parallelism
//===----------------------------------------------------------------------===//

/// The routed rows of `indices` [batch, seq, top_k]: tokens * top_k.
static int64_t routedRows(Value indices) { return numElements(indices); }

static LogicalResult expectRows(Operation *op, StringRef name, Value rows,
                                Value indices, int64_t hidden) {
  if (failed(expectRank(op, "indices", indices, 3, "[batch, seq, top_k]")))
    return failure();
  return expectShape(op, name, rows, {routedRows(indices), hidden},
                     "[tokens * top_k, hidden], one row per routed slot");
}

static LogicalResult expectTopK(Operation *op, Value indices,
                                int64_t numExperts) {
  int64_t k = tensorOf(indices).getShape().back();
  if (k > numExperts)
    return op->emitOpError()
           << "top_k " << k << " exceeds the " << numExperts << " experts";
  return success();
}

LogicalResult MoeDispatchOp::verify() {
  if (failed(
          expectRank(*this, "input", getInput(), 3, "[batch, seq, hidden]")) ||
      failed(
          expectRank(*this, "indices", getIndices(), 3, "[batch, seq, top_k]")))
    return failure();
  ArrayRef<int64_t> x = tensorOf(getInput()).getShape();
  ArrayRef<int64_t> idx = tensorOf(getIndices()).getShape();
  if (idx[0] != x[0] || idx[1] != x[1])
    return emitOpError() << "indices " << shapeString(idx)
                         << " do not route the input's tokens "
                         << shapeString(x);
  if (failed(expectTopK(*this, getIndices(), getNumExperts())) ||
      failed(expectRows(*this, "rows", getRows(), getIndices(), x[2])))
    return failure();
  return expectElementTypes(*this,
                            {{"input", getInput()}, {"rows", getRows()}});
}

int64_t MoeDispatchOp::getForwardFlops() { return 0; }

LogicalResult MoeCombineOp::verify() {
  if (failed(expectRank(*this, "rows", getRows(), 2,
                        "[tokens * top_k, hidden]")) ||
      failed(
          expectRank(*this, "indices", getIndices(), 3, "[batch, seq, top_k]")))
    return failure();
  ArrayRef<int64_t> idx = tensorOf(getIndices()).getShape();
  int64_t hidden = tensorOf(getRows()).getShape().back();
  if (failed(expectTopK(*this, getIndices(), getNumExperts())) ||
      failed(expectRows(*this, "rows", getRows(), getIndices(), hidden)) ||
      failed(expectShape(*this, "result", getResult(), {idx[0], idx[1], hidden},
                         "[batch, seq] of the indices, hidden of the rows")))
    return failure();
  if (getWeights() && failed(expectShape(*this, "weights", getWeights(), idx,
                                         "the shape of the indices")))
    return failure();
  return expectElementTypes(*this,
                            {{"rows", getRows()}, {"result", getResult()}});
}

int64_t MoeCombineOp::getForwardFlops() {
  return (getWeights() ? 2 : 1) * numElements(getRows());
}

LogicalResult MoeCombineBackwardOp::verify() {
  if (failed(expectRank(*this, "dy", getDy(), 3, "[batch, seq, hidden]")) ||
      failed(
          expectRank(*this, "indices", getIndices(), 3, "[batch, seq, top_k]")))
    return failure();
  ArrayRef<int64_t> dy = tensorOf(getDy()).getShape();
  ArrayRef<int64_t> idx = tensorOf(getIndices()).getShape();
  if (failed(expectShape(*this, "indices", getIndices(), {dy[0], dy[1], idx[2]},
                         "[batch, seq] of dy, top_k")) ||
      failed(expectTopK(*this, getIndices(), getNumExperts())) ||
      failed(expectRows(*this, "rows", getRows(), getIndices(), dy[2])) ||
      failed(expectShape(*this, "drows", getDrows(),
                         tensorOf(getRows()).getShape(), "the rows'")) ||
      failed(expectShape(*this, "weights", getWeights(), idx,
                         "the shape of the indices")) ||
      failed(expectShape(*this, "dweights", getDweights(), idx,
                         "the shape of the indices")))
    return failure();
  return expectElementTypes(
      *this, {{"dy", getDy()}, {"rows", getRows()}, {"drows", getDrows()}});
}

int64_t MoeCombineBackwardOp::getForwardFlops() {
  return 3 * numElements(getRows());
}

/// This rank's experts: their count divides num_experts.
static LogicalResult verifyLocalExperts(Operation *op, Value rows, Value w1,
                                        Value w3, Value w2,
                                        int64_t numExperts) {
  if (failed(expectRank(op, "rows", rows, 2, "[rows, hidden]")) ||
      failed(verifyExpertWeights(op, rows, w1, w3, w2)))
    return failure();
  int64_t local = tensorOf(w1).getDimSize(0);
  if (numExperts % local != 0)
    return op->emitOpError()
           << "holds " << local << " experts, which does not divide the "
           << numExperts
           << " experts of the layer: each rank of the expert-parallel group "
              "holds num_experts / ep of them";
  return success();
}

static RankedTensorType localExpertsState(Value rows, Value w1) {
  return RankedTensorType::get(
      {tensorOf(rows).getDimSize(0) * 2 * tensorOf(w1).getDimSize(1)},
      tensorOf(rows).getElementType());
}

LogicalResult MoeLocalExpertsOp::verify() {
  if (failed(verifyLocalExperts(*this, getRows(), getW1(), getW3(), getW2(),
                                getNumExperts())) ||
      failed(expectShape(*this, "result", getResult(),
                         tensorOf(getRows()).getShape(), "the rows'")) ||
      failed(expectShape(*this, "saved", getSaved(),
                         localExpertsState(getRows(), getW1()).getShape(),
                         "W1 v and W3 v of every row, rows x 2 x "
                         "intermediate")) ||
      failed(expectElementTypes(*this, {{"rows", getRows()},
                                        {"result", getResult()},
                                        {"saved", getSaved()}})))
    return failure();
  if (int64_t(getTopK()) > int64_t(getNumExperts()))
    return emitOpError() << "top_k " << getTopK() << " exceeds the "
                         << getNumExperts() << " experts";
  if (auto share = getMaxExpertShareAttr()) {
    double s = share.getValueAsDouble();
    double lo = 1.0 / double(getNumExperts()), hi = 1.0 / double(getTopK());
    if (!(s >= lo * (1 - 1e-12) && s <= hi * (1 + 1e-12)))
      return emitOpError() << "max_expert_share " << s
                           << " is out of range: from 1/num_experts (" << lo
                           << ", uniform) to 1/top_k (" << hi << ")";
  }
  return success();
}

int64_t MoeLocalExpertsOp::getForwardFlops() {
  int64_t rows = tensorOf(getRows()).getDimSize(0);
  int64_t hidden = tensorOf(getRows()).getDimSize(1);
  int64_t inter = tensorOf(getW1()).getDimSize(1);
  return moeExpertProductFlops(rows, hidden, inter) + 5 * rows * inter;
}

LogicalResult MoeLocalExpertsBackwardOp::verify() {
  if (failed(expectRank(*this, "rows", getRows(), 2, "[rows, hidden]")) ||
      failed(verifyExpertWeights(*this, getRows(), getW1(), getW3(), getW2())))
    return failure();
  ArrayRef<int64_t> rows = tensorOf(getRows()).getShape();
  if (failed(expectShape(*this, "dout", getDout(), rows, "the rows'")) ||
      failed(expectShape(*this, "drows", getDrows(), rows, "the rows'")) ||
      failed(expectShape(*this, "saved", getSaved(),
                         localExpertsState(getRows(), getW1()).getShape(),
                         "W1 v and W3 v of every row")) ||
      failed(expectShape(*this, "dw1", getDw1(), tensorOf(getW1()).getShape(),
                         "w1's")) ||
      failed(expectShape(*this, "dw3", getDw3(), tensorOf(getW3()).getShape(),
                         "w3's")) ||
      failed(expectShape(*this, "dw2", getDw2(), tensorOf(getW2()).getShape(),
                         "w2's")) ||
      failed(expectElementTypes(*this, {{"rows", getRows()},
                                        {"dout", getDout()},
                                        {"saved", getSaved()},
                                        {"drows", getDrows()},
                                        {"dw1", getDw1()},
                                        {"dw3", getDw3()},
                                        {"dw2", getDw2()}})))
    return failure();
  if (!getSaved().getDefiningOp<MoeLocalExpertsOp>())
    return emitOpError() << "saved must be the saved state of a "
                            "model.moe_local_experts";
  return success();
}

int64_t MoeLocalExpertsBackwardOp::getForwardFlops() {
  int64_t rows = tensorOf(getRows()).getDimSize(0);
  int64_t hidden = tensorOf(getRows()).getDimSize(1);
  int64_t inter = tensorOf(getW1()).getDimSize(1);
  return 2 * moeExpertProductFlops(rows, hidden, inter) + 10 * rows * inter;
}

//===----------------------------------------------------------------------===//
// The auxiliary load-balancing loss (Mixtral's output_router_logits)
//===----------------------------------------------------------------------===//

/// Router statistics `[2, num_experts]` f32: counts, then probability sums.
static LogicalResult expectStats(Operation *op, StringRef name, Value stats,
                                 int64_t numExperts) {
  return expectShape(op, name, stats, {2, numExperts},
                     "[2, num_experts]: the counts, then the probability sums");
}

LogicalResult MoeRouterStatsOp::verify() {
  if (failed(
          expectRank(*this, "gate", getGate(), 2, "[num_experts, hidden]")) ||
      failed(
          expectRank(*this, "input", getInput(), 3, "[batch, seq, hidden]")) ||
      failed(
          expectRank(*this, "indices", getIndices(), 3, "[batch, seq, top_k]")))
    return failure();
  ArrayRef<int64_t> x = tensorOf(getInput()).getShape();
  int64_t experts = getNumExperts();
  int64_t k = tensorOf(getIndices()).getShape().back();
  if (failed(expectShape(*this, "gate", getGate(), {experts, x[2]},
                         "[num_experts, hidden of the input]")) ||
      failed(expectShape(*this, "indices", getIndices(), {x[0], x[1], k},
                         "[batch, seq] of the input, top_k")) ||
      failed(expectElementTypes(
          *this, {{"input", getInput()}, {"gate", getGate()}})) ||
      failed(expectStats(*this, "result", getResult(), experts)))
    return failure();
  if (k > experts)
    return emitOpError() << "top_k " << k << " exceeds the " << experts
                         << " experts";
  return success();
}

// Logits 2 * hidden per (token, expert); softmax 4 and the sum 1 per logit;
// a count per selected expert.
int64_t MoeRouterStatsOp::getForwardFlops() {
  int64_t tokens = tokensOf(getInput()), experts = getNumExperts();
  int64_t hidden = tensorOf(getInput()).getShape().back();
  int64_t k = tensorOf(getIndices()).getShape().back();
  return moeRouterProductFlops(tokens, experts, hidden) + 5 * tokens * experts +
         tokens * k;
}

// The backward recomputes the logits from the input and the gate.
void MoeRouterStatsOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
  saved.push_back(getGate());
}

// The counts (and so the indices) get no gradient.
LogicalResult
MoeRouterStatsOp::buildBackward(OpBuilder &builder, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> ds = resultGradient(*this, resultGrads, operandGrads);
  if (failed(ds) || !*ds)
    return ds;
  auto backward = builder.create<MoeRouterStatsBackwardOp>(
      getLoc(), getInput().getType(), getGate().getType(), getInput(),
      getGate(), *ds);
  operandGrads.append({backward.getDinput(), backward.getDgate(), Value()});
  return success();
}

LogicalResult MoeRouterStatsBackwardOp::verify() {
  if (failed(
          expectRank(*this, "gate", getGate(), 2, "[num_experts, hidden]")) ||
      failed(expectRank(*this, "input", getInput(), 3, "[batch, seq, hidden]")))
    return failure();
  ArrayRef<int64_t> x = tensorOf(getInput()).getShape();
  int64_t experts = tensorOf(getGate()).getDimSize(0);
  if (failed(expectShape(*this, "gate", getGate(), {experts, x[2]},
                         "[num_experts, hidden of the input]")) ||
      failed(expectStats(*this, "dstats", getDstats(), experts)) ||
      failed(expectShape(*this, "dinput", getDinput(), x, "the input's")) ||
      failed(expectShape(*this, "dgate", getDgate(),
                         tensorOf(getGate()).getShape(), "the gate's")) ||
      failed(expectElementTypes(*this, {{"input", getInput()},
                                        {"gate", getGate()},
                                        {"dinput", getDinput()},
                                        {"dgate", getDgate()}})))
    return failure();
  return success();
}

int64_t MoeRouterStatsBackwardOp::getForwardFlops() {
  int64_t tokens = tokensOf(getInput());
  int64_t experts = tensorOf(getGate()).getDimSize(0);
  int64_t hidden = tensorOf(getInput()).getShape().back();
  return 3 * moeRouterProductFlops(tokens, experts, hidden) +
         8 * tokens * experts;
}

/// The statistics of a load-balancing loss op: at least one, all
/// `[2, num_experts]` for one num_experts of at least top_k.
static LogicalResult verifyLoadBalancing(Operation *op, ValueRange stats,
                                         int64_t topK, double coefficient) {
  if (stats.empty())
    return op->emitOpError() << "needs the statistics of at least one router";
  if (!std::isfinite(coefficient))
    return op->emitOpError()
           << "coefficient must be finite, found " << coefficient;
  if (failed(expectRank(op, "stats #0", stats.front(), 2, "[2, num_experts]")))
    return failure();
  int64_t experts = tensorOf(stats.front()).getDimSize(1);
  for (auto [i, s] : llvm::enumerate(stats))
    if (failed(expectStats(op, ("stats #" + Twine(i)).str(), s, experts)))
      return failure();
  if (topK > experts)
    return op->emitOpError()
           << "top_k " << topK << " exceeds the " << experts << " experts";
  return success();
}

LogicalResult MoeLoadBalancingLossOp::verify() {
  return verifyLoadBalancing(*this, getStats(), int64_t(getTopK()),
                             getCoefficient().convertToDouble());
}

int64_t MoeLoadBalancingLossOp::getForwardFlops() {
  return 3 * int64_t(getStats().size()) * 2 *
         tensorOf(getStats().front()).getDimSize(1);
}

// The backward reads the statistics (their counts), not the loss.
void MoeLoadBalancingLossOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.append(getStats().begin(), getStats().end());
}

// d(loss)/d(loss) = 1; every layer's statistics get the same gradient.
LogicalResult
MoeLoadBalancingLossOp::buildBackward(OpBuilder &builder,
                                      ValueRange resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  FailureOr<Value> dl = resultGradient(*this, resultGrads, operandGrads);
  if (failed(dl) || !*dl)
    return dl;
  auto backward = builder.create<MoeLoadBalancingLossBackwardOp>(
      getLoc(), getStats().front().getType(), *dl, getStats(),
      getCoefficientAttr(), getTopKAttr());
  operandGrads.push_back(*dl);
  operandGrads.append(getStats().size(), backward.getDstats());
  return success();
}

LogicalResult MoeLoadBalancingLossBackwardOp::verify() {
  if (failed(verifyLoadBalancing(*this, getStats(), int64_t(getTopK()),
                                 getCoefficient().convertToDouble())))
    return failure();
  return expectStats(*this, "dstats", getDstats(),
                     tensorOf(getStats().front()).getDimSize(1));
}

int64_t MoeLoadBalancingLossBackwardOp::getForwardFlops() {
  return int64_t(getStats().size()) * 2 *
         tensorOf(getStats().front()).getDimSize(1);
}
