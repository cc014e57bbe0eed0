#!/bin/sh
# The kernel NFS server of the guest: NFSv3 over RDMA (svcrdma on siw0,
# port 20049) and TCP (2049), mountd on 20048, exporting the tmpfs /export.
mkdir -p /export /var/lib/nfs/rpc_pipefs /run/rpcbind /var/lib/nfs/v4recovery
mount -t tmpfs -o size=768m,mode=0777 tmpfs /export
echo '/export *(rw,sync,no_root_squash,insecure,no_subtree_check,fsid=0)' > /etc/exports
modprobe rpcrdma; modprobe nfsd; modprobe nfsv3
mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs
mount -t nfsd nfsd /proc/fs/nfsd
rpcbind -w || echo "HARNESS ERROR rpcbind"
exportfs -ra
rpc.mountd -p 20048 || echo "HARNESS ERROR rpc.mountd"
echo 1048576 > /proc/fs/nfsd/max_block_size
rpc.nfsd -N 4 -N 4.1 -N 4.2 --rdma=20049 4 || echo "HARNESS ERROR rpc.nfsd"
grep -q '^rdma 20049' /proc/fs/nfsd/portlist || echo 'rdma 20049' > /proc/fs/nfsd/portlist
if grep -q '^rdma 20049' /proc/fs/nfsd/portlist; then
    echo "HARNESS nfsd $(tr '\n' ' ' < /proc/fs/nfsd/portlist)"
else
    echo "HARNESS ERROR no rdma listener"
fi
