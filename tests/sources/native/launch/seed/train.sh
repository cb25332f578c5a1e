#!/bin/bash
# A FastChat-style launch (after lm-sys/FastChat scripts/train_vicuna_7b.sh at
# 0e6d3e4beaab66f4d3f93db72541a4abab8af28d), launching ./train.py.
MODEL=${MODEL:-tiny-llama}
torchrun --nproc_per_node=4 --master_port=20001 train.py \
    --model_name_or_path $MODEL \
    --data_path data.json \
    --bf16 True \
    --output_dir output \
    --num_train_epochs 3 \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 16 \
    --learning_rate 2e-5 \
    --model_max_length 128 \
    --gradient_checkpointing True \
    --lazy_preprocess True
