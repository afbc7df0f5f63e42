# Shared helpers for the demo and benchmark scripts (sourced, not run).

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_registry DIR PORT: a docker-registry on 127.0.0.1:PORT storing in DIR.
start_registry() {
  local dir=$1 port=$2
  mkdir -p "$dir/data"
  cat >"$dir/config.yml" <<YML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
YML
  docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
  echo $! >"$dir/pid"
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$port/v2/" >/dev/null && return 0
    sleep 0.1
  done
  echo "registry did not start" >&2
  return 1
}

# build_busybox_oci LAYOUT: an OCI layout with one busybox-static image tagged latest.
build_busybox_oci() {
  local layout=$1 work
  work=$(mktemp -d)
  umoci init --layout "$layout"
  umoci new --image "$layout:latest"
  umoci unpack --image "$layout:latest" "$work/bundle" >/dev/null
  mkdir -p "$work/bundle/rootfs/bin" "$work/bundle/rootfs/etc" "$work/bundle/rootfs/tmp"
  cp /bin/busybox "$work/bundle/rootfs/bin/busybox"
  for a in $(/bin/busybox --list); do
    [ "$a" = busybox ] || ln -sf busybox "$work/bundle/rootfs/bin/$a"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$work/bundle/rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$work/bundle/rootfs/etc/group"
  umoci repack --image "$layout:latest" "$work/bundle" >/dev/null
  umoci config --image "$layout:latest" --config.cmd /bin/sh --config.env PATH=/bin >/dev/null
  rm -rf "$work"
}

# wait_ready HUSK ENDPOINT: until husk serve answers. Its socket is up
# before it has recovered its state (an empty root takes a moment too),
# and until then every call is Unavailable ("still recovering").
wait_ready() {
  for _ in $(seq 400); do
    "$1" images --endpoint "$2" ls >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "husk at $2 did not answer" >&2
  return 1
}

# wait_socket PATH: until a unix socket exists.
wait_socket() {
  for _ in $(seq 200); do
    [ -S "$1" ] && return 0
    sleep 0.05
  done
  echo "no socket at $1" >&2
  return 1
}

# build_big_oci LAYOUT: busybox plus four 25 MB random layers (5 layers, ~100 MB).
build_big_oci() {
  local layout=$1 work i
  build_busybox_oci "$layout"
  work=$(mktemp -d)
  for i in 1 2 3 4; do
    umoci unpack --image "$layout:latest" "$work/b$i" >/dev/null
    mkdir -p "$work/b$i/rootfs/data"
    head -c 25M /dev/urandom >"$work/b$i/rootfs/data/blob$i"
    umoci repack --image "$layout:latest" "$work/b$i" >/dev/null
    rm -rf "$work/b$i"
  done
  rm -rf "$work"
}

# build_pause_oci LAYOUT: a pause image from busybox-static (sleeps forever).
build_pause_oci() {
  build_busybox_oci "$1"
  umoci config --image "$1:latest" --config.entrypoint /bin/sleep --config.cmd 2147483647 \
    --config.user 65534:65534 >/dev/null
}

# write_conflist DIR BRIDGE SUBNET IPAM_DIR: a bridge + host-local + portmap network.
write_conflist() {
  mkdir -p "$1"
  cat >"$1/10-bench.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "net-$2", "plugins": [
  {"type": "bridge", "bridge": "$2", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "$4", "ranges": [[{"subnet": "$3"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
}

# start_containerd DIR CERTS_D [SANDBOX_IMAGE CNI_CONF_DIR]: Debian's
# containerd on its own root and socket; SYSTEMD_CGROUP=true puts runc on
# the systemd cgroup driver.
start_containerd() {
  local dir=$1 certs=$2 pause=${3:-registry.k8s.io/pause:3.6} netd=${4:-$1/net.d}
  mkdir -p "$dir/root" "$dir/state" "$netd"
  cat >"$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "$pause"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$certs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$netd"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = ${SYSTEMD_CGROUP:-false}
TOML
  containerd --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
  echo $! >"$dir/pid"
  wait_socket "$dir/containerd.sock"
}

# bench_images WORK PORT: a registry on 127.0.0.1:PORT (data in WORK/registry)
# holding a pause image and a busybox app image, named in $pause and $app,
# and WORK/certs.d telling husk and containerd to pull from it over HTTP.
bench_images() {
  local work=$1 port=$2
  start_registry "$work/registry" "$port"
  build_pause_oci "$work/layout"
  pause="127.0.0.1:$port/bench/pause:latest"
  skopeo copy --quiet --dest-tls-verify=false "oci:$work/layout:latest" "docker://$pause"
  build_busybox_oci "$work/app"
  app="127.0.0.1:$port/bench/app:latest"
  skopeo copy --quiet --dest-tls-verify=false "oci:$work/app:latest" "docker://$app"
  mkdir -p "$work/certs.d/127.0.0.1:$port"
  printf 'server = "http://127.0.0.1:%s"\n' "$port" >"$work/certs.d/127.0.0.1:$port/hosts.toml"
}
