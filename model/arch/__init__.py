"""The architecture: nn.Modules and forward maths only (docs/design/equations.md §1-12,
docs/design/architecture.md §2).

norm, rope, mhc, moe, engram, compressor, indexer, attention, block, backbone (the text model's
forward), drafter (DSpark's modules), vision (tower and aligner); context types what a forward is
handed (the cache, the recorder, a layer source, as Protocols) and what one layer passes the next.
Imports only the leaves of model/ (config, errors, fusion, layer_map, quant) and itself.
"""
