"""The model processor: ONNX models into layers, keys, corpora and runnable sequences."""
