# A launch script that reads its own arguments (written for the docs and the tests):
#   bash args.sh [-m MODEL] [--lr LR | --lr=LR] [TRAINING FLAGS...]
MODEL=tiny-llama
LR=2e-5
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m|--model) MODEL="$2"; shift 2 ;;
    --lr) LR="$2"; shift 2 ;;
    --lr=*) LR="${1#*=}"; shift ;;
    *) break ;;
  esac
done
python train.py --model_name_or_path $MODEL --output_dir out \
    --learning_rate $LR --per_device_train_batch_size 1 --model_max_length 128 "$@"
