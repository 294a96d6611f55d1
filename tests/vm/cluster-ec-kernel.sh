#!/bin/bash
# The kernel initiator against an erasure-coded volume of a three-node
# cluster: cluster-kernel.sh with PROTECT=ec:2+1 (see there). Run by
# `tests/vm/run.sh cluster-ec-kernel.sh`, which adds cluster-kernel.sh.
PROTECT=ec:2+1 exec bash /vm/cluster-kernel.sh
