#!/usr/bin/env bash
# Two machines on one: network namespaces baton_a<TAG> and baton_b<TAG>
# joined by a veth pair (10.<X>.<Y>.1 and .2, made here), two ranks of
# `baton train` in each with the torchrun environment and
# GLOO_SOCKET_IFNAME naming the namespace's end of the pair.
#   two_machines.sh check                 can namespaces be made here? (exit 0)
#   two_machines.sh run TAG OUT CUT BATON ARGS...
# runs ranks 0, 1 in a and 2, 3 in b, each writing OUT/logR and OUT/rcR
# (its exit code) and dumping to OUT/rR; with CUT > 0, takes the link down
# once rank 0 has logged CUT steps and writes the time to OUT/cut. The
# namespaces are removed on exit.
set -u
if [ "$1" = check ]; then
  [ "$(id -u)" -eq 0 ] || { echo "needs root to make network namespaces"; exit 1; }
  command -v ip > /dev/null || { echo "needs ip (iproute2)"; exit 1; }
  probe=baton_probe$$
  ip netns add $probe 2> /tmp/baton_netns_probe.$$ || {
    echo "cannot make a network namespace: $(cat /tmp/baton_netns_probe.$$)"
    rm -f /tmp/baton_netns_probe.$$; exit 1; }
  # Running in one needs a mount namespace of its own too (not in a chroot).
  if ! ip netns exec $probe true 2> /tmp/baton_netns_probe.$$; then
    echo "cannot run in a network namespace: $(cat /tmp/baton_netns_probe.$$)"
    ip netns del $probe; rm -f /tmp/baton_netns_probe.$$; exit 1
  fi
  ip netns del $probe; rm -f /tmp/baton_netns_probe.$$
  exit 0
fi
shift
tag=$1 out=$2 cut=$3 baton=$4
shift 4
a=baton_a$tag b=baton_b$tag va=bva$tag vb=bvb$tag
net="10.$((tag / 250 % 250 + 1)).$((tag % 250 + 1))"
cleanup() { ip netns del $a 2> /dev/null; ip netns del $b 2> /dev/null; }
trap cleanup EXIT
cleanup
set -e
ip netns add $a
ip netns add $b
ip link add $va type veth peer name $vb
ip link set $va netns $a
ip link set $vb netns $b
ip -n $a addr add $net.1/24 dev $va
ip -n $b addr add $net.2/24 dev $vb
for n in $a $b; do ip -n $n link set lo up; done
ip -n $a link set $va up
ip -n $b link set $vb up
set +e
mkdir -p "$out"
port=$((20000 + tag % 20000))
pids=()
for r in 0 1 2 3; do
  if [ $r -lt 2 ]; then ns=$a ifname=$va; else ns=$b ifname=$vb; fi
  ( ip netns exec $ns env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) \
      LOCAL_WORLD_SIZE=2 MASTER_ADDR=$net.1 MASTER_PORT=$port \
      GLOO_SOCKET_IFNAME=$ifname OMP_WAIT_POLICY=PASSIVE \
      "$baton" train --job.dump_folder="$out/r$r" "$@" > "$out/log$r" 2>&1
    echo $? > "$out/rc$r" ) &
  pids+=($!)
done
if [ "$cut" -gt 0 ]; then
  while [ ! -f "$out/rc0" ]; do
    steps=$(wc -l < "$out/r0/metrics.jsonl" 2> /dev/null || echo 0)
    if [ "$steps" -ge "$cut" ]; then
      ip -n $a link set $va down
      date +%s.%N > "$out/cut"
      break
    fi
    sleep 0.2
  done
fi
wait "${pids[@]}"
