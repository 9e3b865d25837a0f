// A two-layer perceptron with a ReLU between the layers: two matmul dispatches worth tuning.
// ireetune tune examples/mlp.mlir --target cpu
func.func @mlp(%x: tensor<256x512xf32>, %w1: tensor<512x1024xf32>, %w2: tensor<1024x256xf32>) -> tensor<256x256xf32> {
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<256x1024xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<256x512xf32>, tensor<512x1024xf32>) outs(%i1 : tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%h : tensor<256x1024xf32>) outs(%e1 : tensor<256x1024xf32>) {
    ^bb0(%in: f32, %out: f32):
      %m = arith.maximumf %in, %zero : f32
      linalg.yield %m : f32
  } -> tensor<256x1024xf32>
  %e2 = tensor.empty() : tensor<256x256xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<256x256xf32>) -> tensor<256x256xf32>
  %y = linalg.matmul ins(%r, %w2 : tensor<256x1024xf32>, tensor<1024x256xf32>) outs(%i2 : tensor<256x256xf32>) -> tensor<256x256xf32>
  return %y : tensor<256x256xf32>
}
