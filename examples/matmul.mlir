// A 512x512x512 f32 matrix multiplication: the smallest model worth tuning.
// ireetune tune-dispatch examples/matmul.mlir --target cpu --num-candidates 32
func.func @matmul(%lhs: tensor<512x512xf32>, %rhs: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<512x512xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<512x512xf32>) -> tensor<512x512xf32>
  %result = linalg.matmul ins(%lhs, %rhs : tensor<512x512xf32>, tensor<512x512xf32>)
                          outs(%init : tensor<512x512xf32>) -> tensor<512x512xf32>
  return %result : tensor<512x512xf32>
}
