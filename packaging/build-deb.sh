#!/usr/bin/env bash
# Builds the husk Debian package with Debian's own dpkg-deb: the binary
# (HUSK, default the release build), the systemd unit, /etc/husk/config.toml
# (a conffile: `husk config default`), the default CNI network and crictl
# config (installed by postinst only where the node has none), and the
# docs. Writes OUT/husk_<version>-1_<arch>.deb (OUT: target/debian) and
# prints its path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$here/..
husk=${HUSK:-$top/target/x86_64-unknown-linux-gnu/release/husk}
out=${OUT:-$top/target/debian}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1)
arch=$(dpkg --print-architecture)
name="husk_${version}-1_${arch}"
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
chmod 0755 "$tree"

install -d "$tree/DEBIAN" "$tree/usr/bin" "$tree/lib/systemd/system" "$tree/etc/husk" "$tree/etc/husk/conf.d" \
  "$tree/usr/share/husk" "$tree/usr/share/doc/husk"
install -m 0755 "$husk" "$tree/usr/bin/husk"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$tree/usr/bin/husk"
install -m 0644 "$here/husk.service" "$tree/lib/systemd/system/husk.service"
"$husk" config default >"$tree/etc/husk/config.toml"
chmod 0644 "$tree/etc/husk/config.toml"
install -m 0644 "$top/cni/10-husk.conflist" "$tree/usr/share/husk/10-husk.conflist"
install -m 0644 "$here/deb/crictl.yaml" "$tree/usr/share/husk/crictl.yaml"
install -m 0644 "$here/deb/copyright" "$tree/usr/share/doc/husk/copyright"
install -m 0644 "$top/README.md" "$tree/usr/share/doc/husk/README.md"
install -d "$tree/usr/share/lintian/overrides"
install -m 0644 "$here/deb/lintian-overrides" "$tree/usr/share/lintian/overrides/husk"
install -d "$tree/usr/share/man/man8"
gzip -9n <"$here/deb/husk.8" >"$tree/usr/share/man/man8/husk.8.gz"
chmod 0644 "$tree/usr/share/man/man8/husk.8.gz"
printf 'husk (%s-1) unstable; urgency=medium\n\n  * Package of husk %s.\n\n -- husk maintainers <husk@localhost>  %s\n' \
  "$version" "$version" "$(date -R -d @"${SOURCE_DATE_EPOCH:-0}")" | gzip -9n >"$tree/usr/share/doc/husk/changelog.Debian.gz"

# Maintainer scripts; postrm compares against the shipped defaults.
cni_sum=$(sha256sum <"$top/cni/10-husk.conflist")
crictl_sum=$(sha256sum <"$here/deb/crictl.yaml")
install -m 0755 "$here/deb/postinst" "$here/deb/prerm" "$tree/DEBIAN/"
sed -e "s|@CNI_SUM@|$cni_sum|" -e "s|@CRICTL_SUM@|$crictl_sum|" "$here/deb/postrm" >"$tree/DEBIAN/postrm"
chmod 0755 "$tree/DEBIAN/postrm"
echo /etc/husk/config.toml >"$tree/DEBIAN/conffiles"

# Run-time dependencies: the shared libraries the binary links, if any (by
# the packages that ship them).
# No reader here stops early: under pipefail a writer killed by SIGPIPE
# (ldconfig, dpkg -S before `head`) fails the whole script with 141.
libs=$(objdump -p "$tree/usr/bin/husk" | awk '/NEEDED/ {print $2}')
deps=()
for l in $libs; do
  path=$(ldconfig -p | awk -v l="$l" '$1 == l && !found {print $NF; found = 1}')
  pkg=$( (dpkg -S "$(readlink -f "$path")" 2>/dev/null || true) | awk -F: 'NR == 1 {print $1}')
  [ -z "$pkg" ] && pkg=$( (dpkg -S "$path" 2>/dev/null || true) | awk -F: 'NR == 1 {print $1}')
  [ -n "$pkg" ] || { echo "build-deb: no package ships $l" >&2; exit 1; }
  ver=$(dpkg-query -W -f='${Version}' "$pkg" | sed 's/[-+~].*//')
  deps+=("$pkg (>= $ver)")
done
# A static build links no shared library, but glibc loads the node's NSS
# modules (hosts, passwd) of its own version at run time.
if [ ${#deps[@]} -eq 0 ]; then
  deps+=("libc6 (>= $(dpkg-query -W -f='${Version}' libc6 | sed 's/[-+~].*//'))")
fi
depends=$(printf '%s\n' "${deps[@]}" | sort -u | paste -sd, | sed 's/,/, /g')
size=$(du -sk --exclude=DEBIAN "$tree" | cut -f1)
cat >"$tree/DEBIAN/control" <<CONTROL
Package: husk
Version: ${version}-1
Architecture: ${arch}
Maintainer: husk maintainers <husk@localhost>
Installed-Size: ${size}
Depends: ${depends}
Recommends: containernetworking-plugins, iptables
Suggests: cri-tools
Section: admin
Priority: optional
Description: CRI v1 container runtime for Kubernetes nodes
 husk serves the kubelet's Container Runtime Interface on a unix socket:
 it pulls OCI and Docker images into overlayfs snapshots, runs pod
 sandboxes with CNI networking, and runs containers through a small
 per-pod monitor that outlives restarts of the server.
 .
 Replacing containerd on a node is this package and one kubelet flag;
 "husk check" tells what the host lacks before that.
CONTROL
mkdir -p "$out"
# DEB_COMPRESSION (xz, gzip, none): the suite's packages, made from a debug
# build for a test, need not be small.
dpkg-deb --root-owner-group "-Z${DEB_COMPRESSION:-xz}" --build "$tree" "$out/$name.deb" >/dev/null
echo "$out/$name.deb"
