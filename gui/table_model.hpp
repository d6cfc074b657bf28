#pragma once
// A read-only table model over a list of plain rows, its columns given as
// (header, value function) pairs. Every model of the console is one of these
// (see models.hpp); none knows where its rows come from.

#include <QAbstractTableModel>
#include <QList>
#include <QString>
#include <QVariant>

#include <functional>
#include <utility>
#include <vector>

namespace ferry::console {

template <class Row>
class table_model : public QAbstractTableModel {
public:
  /// Returns the cell's value for `role` (DisplayRole, ToolTipRole,
  /// ForegroundRole, ...); an invalid QVariant for roles it does not serve.
  using cell_fn = std::function<QVariant(const Row&, int role)>;

  struct column {
    QString header;
    cell_fn cell;
  };

  explicit table_model(std::vector<column> columns, QObject* parent = nullptr)
    : QAbstractTableModel(parent), columns_(std::move(columns)) {
  }

  /// Replaces the rows. Same row count: the cells change in place (views
  /// keep their selection); otherwise the model resets.
  void set_rows(QList<Row> rows) {
    if (rows.size() == rows_.size() && !rows_.isEmpty()) {
      rows_ = std::move(rows);
      emit dataChanged(index(0, 0), index(rowCount() - 1, columnCount() - 1));
      return;
    }
    beginResetModel();
    rows_ = std::move(rows);
    endResetModel();
  }

  const QList<Row>& rows() const { return rows_; }

  /// The row behind a model row; nullptr when out of range.
  const Row* row_at(int i) const {
    return i >= 0 && i < rows_.size() ? &rows_[i] : nullptr;
  }

  int rowCount(const QModelIndex& parent = {}) const override {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
  }

  int columnCount(const QModelIndex& parent = {}) const override {
    return parent.isValid() ? 0 : static_cast<int>(columns_.size());
  }

  QVariant data(const QModelIndex& idx, int role = Qt::DisplayRole) const override {
    if (!idx.isValid() || idx.row() >= rows_.size()
        || idx.column() >= static_cast<int>(columns_.size()))
      return {};
    return columns_[idx.column()].cell(rows_[idx.row()], role);
  }

  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override {
    if (role != Qt::DisplayRole || orientation != Qt::Horizontal || section < 0
        || section >= static_cast<int>(columns_.size()))
      return QAbstractTableModel::headerData(section, orientation, role);
    return columns_[section].header;
  }

private:
  std::vector<column> columns_;
  QList<Row> rows_;
};

} // namespace ferry::console
