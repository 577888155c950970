// zero-partition's options are checked before anything changes, and the
// values appear in the message.
// RUN: not zeroc-opt %s --zero-partition="world-size=0" 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: not zeroc-opt %s --zero-partition="world-size=-2" 2>&1 | FileCheck %s --check-prefix=NEGWORLD
// RUN: not zeroc-opt %s --zero-partition="stage=4" 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not zeroc-opt %s --zero-partition="stage=-1" 2>&1 | FileCheck %s --check-prefix=NEGSTAGE
// RUN: not zeroc-opt %s --zero-partition="stage=3 persistence-threshold=-1" 2>&1 | FileCheck %s --check-prefix=THRESHOLD

// WORLD: error: world-size must be at least 1, found 0{{$}}
// NEGWORLD: error: world-size must be at least 1, found -2{{$}}
// STAGE: error: ZeRO stage must be 0, 1, 2 or 3, found 4{{$}}
// NEGSTAGE: error: ZeRO stage must be 0, 1, 2 or 3, found -1{{$}}
// THRESHOLD: error: persistence-threshold must not be negative, found -1{{$}}
module {
  model.param @w : tensor<4xf32> init <zeros>
}
