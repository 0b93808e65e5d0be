# Sourced on the GPU host (bench/libaio_bundle.sh made ./.aio): the bundled libaio for DeepSpeed's async_io op.
aio_root=$PWD/.aio
export CPATH=$aio_root/include${CPATH:+:$CPATH}
export LIBRARY_PATH=$aio_root/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
export LD_LIBRARY_PATH=$aio_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CFLAGS="-I$aio_root/include${CFLAGS:+ $CFLAGS}"
export LDFLAGS="-L$aio_root/lib${LDFLAGS:+ $LDFLAGS}"
