"""Protocol-free serving core: model repository, batcher, data plane. Never imports grpc."""
