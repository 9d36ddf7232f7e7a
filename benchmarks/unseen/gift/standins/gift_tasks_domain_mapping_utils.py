"""Stand-in for gift/tasks/domain_mapping_utils.py (ours, for the drivers).

The real module (sinkhorn matching, pure JAX, no Flax) is reached only by
pipeline_utils.get_self_matching_matrix(mode='sinkhorn'), which the drivers
do not call.
"""
