"""Frontends: models from other formats turned into FDSL text. `onnx_file` reads an ONNX file
without trusting it (protobuf, opsets, external data, initializer sizes, the graph's order);
`onnx_import` maps its graph to one FDSL chain and its initializers to the chain's weights.
The public door is `fusec.onnx` (`load`, `import_model`). Nothing here is imported by
`import fusec`: only the importer needs the `onnx` package (`pip install 'fusec[onnx]'`).
"""
