#!/bin/bash
# Llama-3.1-8B pre-training with Megatron-LM on 4 nodes x 8 GPUs, in the shape of Megatron-LM's
# examples/llama launch scripts: variables, bash arrays spliced into one torchrun command.
export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NUM_NODES=4
TP=2
PP=2
CHECKPOINT_PATH=/checkpoints/llama3.1-8b
DATA_PATH=/data/llama3/text_document

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_addr ${MASTER_ADDR:-localhost}
    --master_port 6000
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length 8192
    --max-position-embeddings 131072
    --position-embedding-type rope
    --rotary-base 500000
    --use-rope-scaling
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --init-method-std 0.02
    --attention-backend flash
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 128
    --train-iters 1000
    --lr 3.0e-4
    --min-lr 3.0e-5
    --lr-decay-style cosine
    --lr-warmup-iters 100
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --clip-grad 1.0
    --bf16
    --recompute-granularity selective
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP
    --pipeline-model-parallel-size $PP
    --sequence-parallel
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --split 99,1,0
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model meta-llama/Llama-3.1-8B
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 10
    --log-throughput
    --save-interval 500
    --eval-interval 500
    --eval-iters 10
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --tensorboard-dir $CHECKPOINT_PATH/tensorboard
)

mkdir -p $CHECKPOINT_PATH
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]} 2>&1 | tee $CHECKPOINT_PATH/train.log
echo "done"
