#!/bin/bash
# A first stage that reads, a second whose entry point is not in the project (for the tests).
python train.py --model_name_or_path tiny-llama --output_dir sft --model_max_length 128 \
    --per_device_train_batch_size 1
deepspeed --num_gpus 2 step2/main.py --model_name_or_path tiny-llama
