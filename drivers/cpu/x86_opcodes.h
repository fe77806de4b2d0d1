// The x86-64 instruction forms the assembler (x86_encode.cpp) interprets: which operands each form takes, where each
// operand goes in the encoding, and the opcode bits. Internal to the assembler.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace th::x86::detail {

// The encodings a form may take; a form with both VEX and EVEX takes VEX where its operands allow.
enum Enc : uint8_t { kLegacy = 1, kVex = 2, kEvex = 4 };

// A form's size parameter P, one bit per value: the general-purpose operand size (8-64) for legacy forms, the vector
// length (128-512, which also sets VEX.L / EVEX.L'L) for VEX and EVEX forms. Operands sized "P" follow it.
enum SizeBit : uint8_t { kS8 = 1, kS16 = 2, kS32 = 4, kS64 = 8, kS128 = 16, kS256 = 32, kS512 = 64 };

enum Flag : uint8_t {
  kD64 = 1,        // 64-bit operand size without REX.W (push, pop, indirect call and jmp)
  kLockable = 2,   // takes a lock prefix when its destination is memory
  kNoMask = 4,     // the EVEX form has no {k} write mask
  kModrmOnly = 8,  // no operands, but a ModRM byte 11'ext'000 (the fences)
  kNotZero = 16,   // the opcode-embedded register must not be number 0 (xchg eax, eax is not a nop)
};

// What an operand slot accepts. A slot is one or two alternatives ("r|m": a register or memory).
enum class Kind : uint8_t { Gpr, Acc, Cl, Vec, K, Mem, Imm, SImm8, One, Rel };
// How an alternative's width follows P: fixed bits, P, P/2, P/4, P/8 (vector registers never below 128 bits), or any.
enum class Rule : uint8_t { Fixed, P, Half, Quarter, Eighth, Any };

struct Alt {
  Kind kind = Kind::Gpr;
  Rule rule = Rule::Fixed;
  uint16_t bits = 0;
};

// field: where the operand is encoded. 'r' ModRM.reg, 'm' ModRM.rm, 'v' VEX/EVEX.vvvv, 'o' the opcode's low 3 bits,
// 'i' an immediate, 'l' imm8[7:4] (VEX is4), 'j' a relative jump target, '-' implied by the opcode.
struct Slot {
  std::array<Alt, 2> alts{};
  uint8_t n = 0;
  char field = '-';
};

struct Form {
  std::string_view ops_text;  // the operand tokens, for messages
  std::array<Slot, 4> slots{};
  uint8_t nops = 0;
  uint8_t enc = kLegacy;
  uint8_t pp = 0;         // mandatory prefix: 0, 0x66, 0xF3, 0xF2
  uint8_t map = 0;        // 0 one-byte, 1 0F, 2 0F38, 3 0F3A
  uint8_t op = 0;
  uint8_t short_op = 0;   // a jump's rel8 opcode (0: it has none)
  int8_t ext = -1;        // ModRM.reg's /digit, -1 when ModRM.reg holds an operand
  uint8_t vex_w = 0;      // VEX.W (W-ignored forms take 0, as assemblers emit)
  uint8_t evex_w = 0;
  uint8_t sizes = 0;      // SizeBit set: the values P may take
  uint8_t flags = 0;
};

// The forms of a (lower-case) mnemonic in table order; empty for a mnemonic the table lacks.
std::span<const Form> forms_of(std::string_view mnemonic);
// Every mnemonic in the table, sorted.
std::vector<std::string_view> all_mnemonics();

}  // namespace th::x86::detail
