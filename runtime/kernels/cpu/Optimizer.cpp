//===- Optimizer.cpp - Adam / AdamW, gradient clipping, loss scaling ------===//

#include "cpu/Optimizer.h"

#include <algorithm>
#include <cmath>

namespace zeroc::cpu {

namespace {

constexpr int64_t kChunk = 4096;

std::string checkState(const char *name, const Tensor &t, int64_t numel) {
  if (t.dtype != DType::F32 || t.numel() != numel)
    return std::string("adam_update: ") + name + " must be f32 with " +
           std::to_string(numel) + " elements, found " + describe(t);
  return checkFloat("adam_update", name, t);
}

} // namespace

Status checkAdamUpdate(int64_t step, const Tensor &grad, const Tensor &master,
                       const Tensor &expAvg, const Tensor &expAvgSq,
                       const Tensor *param16) {
  int64_t n = grad.numel();
  if (Status s = firstError({checkFloat("adam_update", "grad", grad),
                             checkState("master", master, n),
                             checkState("exp_avg", expAvg, n),
                             checkState("exp_avg_sq", expAvgSq, n)});
      !s.ok())
    return s;
  if (param16) {
    if (Status s = firstError({checkFloat("adam_update", "param", *param16)});
        !s.ok())
      return s;
    if (param16->numel() != n)
      return {"adam_update: param must have " + std::to_string(n) +
              " elements, found " + describe(*param16)};
  }
  if (step < 1)
    return {"adam_update: step must be >= 1, found " + std::to_string(step)};
  return {};
}

AdamStepConstants adamStepConstants(const AdamSettings &settings,
                                    int64_t step) {
  AdamStepConstants c;
  c.lr = float(settings.lr);
  c.beta1 = float(settings.beta1);
  c.beta2 = float(settings.beta2);
  c.eps = float(settings.eps);
  c.decay = float(settings.weightDecay);
  c.oneMinusBeta1 = 1.0f - c.beta1;
  c.oneMinusBeta2 = 1.0f - c.beta2;
  c.stepSize =
      float(settings.lr / (1.0 - std::pow(settings.beta1, double(step))));
  c.rootCorrection2 =
      float(1.0 / std::sqrt(1.0 - std::pow(settings.beta2, double(step))));
  c.adamw = settings.adamw;
  return c;
}

Status adamUpdate(const AdamSettings &settings, int64_t step,
                  const Tensor &grad, const Tensor &master,
                  const Tensor &expAvg, const Tensor &expAvgSq,
                  const Tensor *param16) {
  if (Status s = checkAdamUpdate(step, grad, master, expAvg, expAvgSq, param16);
      !s.ok())
    return s;
  AdamStepConstants c = adamStepConstants(settings, step);
  float *p = master.f32(), *m = expAvg.f32(), *v = expAvgSq.f32();
  float g[kChunk];
  for (int64_t done = 0, n = grad.numel(); done < n; done += kChunk) {
    int64_t count = std::min(kChunk, n - done);
    loadF32(grad, done, count, g);
    for (int64_t i = 0; i < count; ++i)
      adamElement(c, g[i], p[done + i], m[done + i], v[done + i]);
    if (param16)
      storeF32(*param16, done, count, p + done);
  }
  return {};
}

double sumOfSquares(const Tensor &grad) {
  float g[kChunk];
  double sum = 0.0;
  for (int64_t done = 0, n = grad.numel(); done < n; done += kChunk) {
    int64_t count = std::min(kChunk, n - done);
    loadF32(grad, done, count, g);
    for (int64_t i = 0; i < count; ++i)
      sum += double(g[i]) * double(g[i]);
  }
  return sum;
}

float clipCoefficient(double totalSumOfSquares, double maxNorm) {
  double norm = std::sqrt(totalSumOfSquares);
  if (std::isnan(norm))
    return std::nanf("");
  return float(maxNorm / std::max(norm, maxNorm));
}

Status checkScaleInPlace(const Tensor &t) {
  return firstError({checkFloat("scale", "tensor", t)});
}

Status scaleInPlace(const Tensor &t, float factor) {
  if (Status s = checkScaleInPlace(t); !s.ok())
    return s;
  float x[kChunk];
  for (int64_t done = 0, n = t.numel(); done < n; done += kChunk) {
    int64_t count = std::min(kChunk, n - done);
    loadF32(t, done, count, x);
    for (int64_t i = 0; i < count; ++i)
      x[i] *= factor;
    storeF32(t, done, count, x);
  }
  return {};
}

Status checkUnscaleGrads(const Tensor &grad, double lossScale) {
  if (Status s = firstError({checkFloat("unscale_grads", "grad", grad)});
      !s.ok())
    return s;
  if (!(lossScale > 0.0))
    return {"unscale_grads: the loss scale must be positive, found " +
            std::to_string(lossScale)};
  return {};
}

Status unscaleGrads(const Tensor &grad, double lossScale, bool &overflow) {
  if (Status s = checkUnscaleGrads(grad, lossScale); !s.ok())
    return s;
  float scale = float(lossScale);
  float g[kChunk];
  for (int64_t done = 0, n = grad.numel(); done < n; done += kChunk) {
    int64_t count = std::min(kChunk, n - done);
    loadF32(grad, done, count, g);
    for (int64_t i = 0; i < count; ++i)
      g[i] /= scale;
    storeF32(grad, done, count, g);
    // Checked as stored: a value that overflows its 16-bit storage counts.
    for (int64_t i = 0; i < count; ++i)
      if (!std::isfinite(roundToDType(g[i], grad.dtype)))
        overflow = true;
  }
  return {};
}

LossScaleState initialLossScale(const LossScaleSettings &settings) {
  LossScaleState state;
  state.scale = settings.staticLossScale > 0.0
                    ? settings.staticLossScale
                    : std::ldexp(1.0, int(settings.initialScalePower));
  state.hysteresisLeft = settings.hysteresis;
  return state;
}

void updateLossScale(const LossScaleSettings &settings, bool overflow,
                     LossScaleState &state) {
  if (settings.staticLossScale > 0.0) {
    ++state.iteration;
    return;
  }
  if (overflow) {
    if (settings.hysteresis <= 1 || state.hysteresisLeft <= 1)
      state.scale = std::max(state.scale / 2.0, settings.minLossScale);
    else
      --state.hysteresisLeft;
    state.lastOverflow = state.iteration;
  } else if (settings.lossScaleWindow > 0 &&
             (state.iteration - state.lastOverflow) %
                     settings.lossScaleWindow ==
                 0) {
    state.hysteresisLeft = settings.hysteresis;
    state.scale *= 2.0;
  }
  ++state.iteration;
}

} // namespace zeroc::cpu
