"""KV block pools: the paged cache an instance keeps its requests' KV in (`BlockPool`), the
GPU cache with prefix caching (`KVCache`), and a checked wrapper for debug runs."""
