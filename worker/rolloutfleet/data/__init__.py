"""Experience as data: column batches (:mod:`.batch`, :mod:`.multiagent_batch`), their wire
format (:mod:`.codec`: a versioned header + raw buffers, never pickle) and observation
filters (:mod:`.filters`). numpy only; no Redis, no torch.
"""
