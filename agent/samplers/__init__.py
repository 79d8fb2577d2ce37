"""Where replies come from: the Sampler protocol the driver asks, our engine behind it, a remote
OpenAI-compatible server behind it, and the one wire mapping and reply streamer both sides use."""
